"""End to end: a mesh, a skeleton and annotations written by shardvol, served by
`shardvol serve`, drawn by real Neuroglancer over the segmentation they belong to.

Segment 7 gets a sharded multi-resolution mesh of a sphere and a skeleton (a line beside
it), and a sharded point annotation collection is written; Neuroglancer (headless
Chromium, as in test_neuroglancer_e2e.py) draws the 3-D view (the segment's colour fills a
disc of the sphere's projected size where it is, and a line along the skeleton's
vertices) and the x-y view (the annotation colour at each point), reading every object
over HTTP with no errors.

Set SHARDVOL_NEUROGLANCER_OBJECTS_PNG=docs/neuroglancer-objects.png to save the 3-D view.
"""

from __future__ import annotations

import io
import os
import time

import numpy as np

from shardvol import Annotations, Mesh, Skeleton, Volume

from .test_neuroglancer_e2e import (
    ServeProcess,
    _browser,
    open_browser,
    parse_log,
    screenshot_when_loaded,
)

SIZE = (128, 128, 64)
RESOLUTION = (8, 8, 8)
CENTRE = np.array([64, 64, 32])  # voxels
RADIUS = 20  # voxels
MESH_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
                 "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
                 "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
POINTS = np.array([[30, 30, 32], [100, 40, 32], [50, 100, 32], [96, 96, 32]], np.float32)
YELLOW = (255, 255, 0)
PANEL = (600, 600)


def icosphere(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    """A unit sphere: an icosahedron's faces split in four ``subdivisions`` times."""
    t = (1 + 5 ** 0.5) / 2
    verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t),
             (0, -1, -t), (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
             (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
             (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    points = [np.array(v, float) / np.linalg.norm(v) for v in verts]
    for _ in range(subdivisions):
        middle: dict[tuple[int, int], int] = {}

        def mid(a: int, b: int, middle: dict[tuple[int, int], int] = middle) -> int:
            key = (min(a, b), max(a, b))
            if key not in middle:
                p = points[a] + points[b]
                points.append(p / np.linalg.norm(p))
                middle[key] = len(points) - 1
            return middle[key]

        faces = [f for a, b, c in faces for f in (
            (a, mid(a, b), mid(c, a)), (b, mid(b, c), mid(a, b)), (c, mid(c, a), mid(b, c)),
            (mid(a, b), mid(b, c), mid(c, a)))]
    return np.array(points, np.float32), np.array(faces, np.uint32)


def write_data(root: str) -> None:
    x, y, z = np.meshgrid(*[np.arange(n) for n in SIZE], indexing="ij")
    seg = np.zeros(SIZE, np.uint64)
    seg[(x - CENTRE[0]) ** 2 + (y - CENTRE[1]) ** 2 + (z - CENTRE[2]) ** 2 < RADIUS ** 2] = 7
    vol = Volume.create(os.path.join(root, "seg"), size=SIZE, data_type="uint64",
                        type="segmentation", resolution=RESOLUTION, chunk_size=(64, 64, 64),
                        encoding="compressed_segmentation")
    vol[...] = seg[..., None]
    unit, faces = icosphere(3)
    nm = np.array(RESOLUTION, np.float32)
    sphere = Mesh(vertices=(unit * RADIUS + CENTRE) * nm, faces=faces)
    vol.create_meshes(multires=True, sharding=MESH_SHARDING)
    vol.meshes[7] = sphere
    vol.create_skeletons()
    path = np.stack([np.linspace(10, 118, 12), np.full(12, 110), np.full(12, 32)], 1)
    vol.skeletons[7] = Skeleton(
        vertices=(path * nm).astype(np.float32),
        edges=np.stack([np.arange(11), np.arange(1, 12)], 1).astype(np.uint32),
        attributes={"radius": np.full(12, 8, np.float32)})
    notes = Annotations.create(
        os.path.join(root, "notes"), annotation_type="point",
        dimensions={"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [8e-9, "m"]},
        lower_bound=[0, 0, 0], upper_bound=list(SIZE), by_id_sharding=MESH_SHARDING)
    notes.write(np.arange(1, len(POINTS) + 1, dtype=np.uint64), POINTS)


def near(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 60) -> np.ndarray:
    return np.all(np.abs(pixels - np.array(rgb)) <= tolerance, axis=-1)


def test_neuroglancer_draws_meshes_skeletons_and_annotations(tmp_path):
    chrome, chromedriver = _browser()
    import neuroglancer
    from PIL import Image

    write_data(str(tmp_path / "data"))
    server = ServeProcess(str(tmp_path / "data"))
    neuroglancer.set_server_bind_address("127.0.0.1")
    driver = None
    try:
        base = server.base_url
        viewer = neuroglancer.Viewer()
        with viewer.txn() as s:
            s.layers["seg"] = neuroglancer.SegmentationLayer(
                source=f"precomputed://{base}/seg", segments=[7],
                segment_colors={7: "#ff0000"}, selected_alpha=0.0,
                not_selected_alpha=0.0)
            s.layers["notes"] = neuroglancer.AnnotationLayer(
                source=f"precomputed://{base}/notes", annotation_color="#ffff00")
            s.dimensions = neuroglancer.CoordinateSpace(
                names=["x", "y", "z"], units="nm", scales=RESOLUTION)
            s.position = [*CENTRE.tolist()]
            s.layout = "3d"
            s.projection_scale = 2 * SIZE[0]  # (voxels across the panel's height)
            s.projection_orientation = [0, 0, 0, 1]  # looking down z
            s.show_axis_lines = False
            s.show_default_annotations = False
        driver = open_browser(chrome, chromedriver, str(tmp_path / "chrome-profile"),
                              viewer.get_viewer_url())
        three_d = screenshot_when_loaded(viewer, PANEL)
        with viewer.txn() as s:
            s.layout = "xy"
            s.cross_section_scale = 1
            s.position = [*CENTRE[:2].tolist(), 32.5]
        time.sleep(0.5)
        flat = screenshot_when_loaded(viewer, PANEL)
        console = driver.get_log("browser")
    finally:
        if driver is not None:
            driver.quit()
        neuroglancer.stop()
        exit_code = server.stop()

    shot3 = np.asarray(Image.open(io.BytesIO(three_d.image)).convert("RGB")).astype(int)
    save = os.environ.get("SHARDVOL_NEUROGLANCER_OBJECTS_PNG")
    if save:
        Image.fromarray(shot3.astype(np.uint8)).save(save)
    # the sphere: a shaded red disc, centred, of the sphere's projected size; the skeleton:
    # a red line at y = 110 (below it on the screen), as long as its vertices span
    red = (shot3[..., 0] > 60) & (shot3[..., 1] < shot3[..., 0] // 3) & (
        shot3[..., 2] < shot3[..., 0] // 3)
    pixels_per_voxel = PANEL[1] / (2 * SIZE[0])  # (projection_scale spans the panel's height)
    skeleton_row = PANEL[1] / 2 + (110 - CENTRE[1]) * pixels_per_voxel
    rows, cols = np.nonzero(red[: int(skeleton_row) - 10])
    expected_area = np.pi * (RADIUS * pixels_per_voxel) ** 2
    assert 0.6 * expected_area < len(rows) < 1.4 * expected_area, (len(rows), expected_area)
    assert abs(cols.mean() - PANEL[0] / 2) < 10 and abs(rows.mean() - PANEL[1] / 2) < 10
    line_rows, line_cols = np.nonzero(red[int(skeleton_row) - 10:])
    assert len(line_rows) > 20, "no skeleton drawn"
    assert np.ptp(line_cols) > 0.7 * 108 * pixels_per_voxel and np.ptp(line_rows) < 8

    # the x-y view: each point annotation drawn in yellow where it is
    shot2 = np.asarray(Image.open(io.BytesIO(flat.image)).convert("RGB")).astype(int)
    yellow = near(shot2, YELLOW)
    for px, py, _ in POINTS:
        col, row = int(px - CENTRE[0] + PANEL[0] // 2), int(py - CENTRE[1] + PANEL[1] // 2)
        assert yellow[row - 4:row + 5, col - 4:col + 5].any(), (px, py)

    assert exit_code == 0, server.log
    log = parse_log(server.log)
    paths = [p for _, p, _, _ in log]
    assert any(p.startswith("/seg/mesh/") and p.endswith(".shard") for p in paths), paths
    assert any(p.startswith("/seg/skeletons/") for p in paths), paths
    assert any(p.startswith("/notes/") for p in paths), paths
    assert all(status in (200, 206, 404) for *_, status in log)
    severe = [e for e in console if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
    assert not severe, severe
