"""End to end: volumes written by shardvol, served by `shardvol serve`, drawn by real Neuroglancer.

The real Neuroglancer web client (shipped by the ``neuroglancer`` package) runs in headless
Chromium driven by selenium, reads a multi-scale sharded jpeg image and a sharded (hashed)
compressed_segmentation volume over HTTP from ``python -m shardvol serve``, and the test
checks the pixels Neuroglancer drew against the data: every image pixel equals the voxel
shardvol reads back (within jpeg decoder rounding), every segment's disc is drawn in its
colour at its place.  It also checks that the server answered Range requests for the
.shard files of both layers and nothing it should not have, and that the browser logged no
errors.

Skipped (with the reason) when chromium or chromedriver is not installed, unless
SHARDVOL_REQUIRE_BROWSER is set (CI sets it: there a missing browser is a failure).
Set SHARDVOL_NEUROGLANCER_PNG=docs/neuroglancer.png to save the page screenshot there.
"""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from shardvol import Volume, downsample

from .processes import popen_interruptible

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _browser() -> tuple[str, str]:
    chrome = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                  "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if chrome and driver:
        return chrome, driver
    reason = ("needs chromium and chromedriver (Debian: apt-get install chromium "
              "chromium-driver); not found on PATH")
    if os.environ.get("SHARDVOL_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


CHROME_FLAGS = [
    "--headless=new", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
    "--ignore-gpu-blocklist", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--window-size=1200,800",
]

SIZE = (512, 512, 32)
RESOLUTION = (4, 4, 40)
Z = 16  # the section shown
# segment id, disc centre (x, y), radius, colour (opaque in the view)
SEGMENTS = [
    (7, (130, 140), 70, (255, 0, 0)),
    (11, (380, 120), 60, (0, 0, 255)),
    (13, (270, 380), 70, (0, 200, 0)),
    (123456789012, (110, 410), 50, (255, 0, 255)),
]
PANEL = (800, 700)  # screenshot size in pixels: 1 pixel per voxel, volume centred
CENTRE = (256, 256)

IMAGE_SHARDING = {  # mip 0: 8 aligned shards of 4x4x1 chunks
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 2,
    "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}
SEG_SHARDING = {  # mip 0: 4 hashed shards, gzip data
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 0,
    "minishard_bits": 3, "shard_bits": 2, "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}


# ----------------------------------------------------------------- data
def make_data() -> tuple[np.ndarray, np.ndarray]:
    x, y, z = np.meshgrid(*[np.arange(n) for n in SIZE], indexing="ij")
    smooth = 128 + 60 * np.sin(x / 23.0) * np.cos(y / 31.0) + 30 * np.sin((x + y) / 57.0) + z
    noise = np.random.default_rng(0).integers(-12, 13, SIZE)  # tells mip 0 from coarser mips
    image = np.clip(smooth + noise, 0, 255).astype(np.uint8)
    seg = np.zeros(SIZE, np.uint64)
    for sid, (cx, cy), r, _ in SEGMENTS:
        seg[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = sid
    return image, seg


def write_volumes(root: str, image: np.ndarray, seg: np.ndarray) -> None:
    """Mip 0 of both with the sharding specs above, coarser scales by shardvol.downsample."""
    vol = Volume.create(os.path.join(root, "image"), size=SIZE, data_type="uint8",
                        resolution=RESOLUTION, chunk_size=(64, 64, 16), encoding="jpeg",
                        jpeg_quality=95, sharding=IMAGE_SHARDING)
    vol[...] = image[..., None]
    downsample(vol, factor=(2, 2, 1), num_mips=2, sharding="auto", progress=False)  # mean
    labels = Volume.create(os.path.join(root, "seg"), size=SIZE, type="segmentation",
                           data_type="uint64", resolution=RESOLUTION, chunk_size=(64, 64, 16),
                           encoding="compressed_segmentation", sharding=SEG_SHARDING)
    labels[...] = seg[..., None]
    downsample(labels, factor=(2, 2, 1), num_mips=1, sharding="auto", progress=False)  # mode


# --------------------------------------------------------------- server
class ServeProcess:
    """``python -m shardvol serve DIR --port 0`` with its output read by threads."""

    def __init__(self, directory: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        self.proc = popen_interruptible(
            [sys.executable, "-m", "shardvol", "serve", directory, "--port", "0",
             "--host", "127.0.0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        self.stdout: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout.put),
                             daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.log.append),
                             daemon=True),
        ]
        for thread in self._pumps:
            thread.start()
        self.printed = self._read_banner()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def _read_banner(self) -> list[str]:
        lines: list[str] = []
        deadline = time.monotonic() + 20
        while not any(line.startswith("  precomputed://") for line in lines[2:3]):
            try:
                lines.append(self.stdout.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                self.stop()
                raise AssertionError(f"shardvol serve printed {lines}, log {self.log}") from None
        lines.append(self.stdout.get(timeout=5))  # the second volume
        return lines

    @property
    def base_url(self) -> str:
        m = re.search(r" at (http://127\.0\.0\.1:\d+)/ ", self.printed[0])
        assert m, self.printed
        return m.group(1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean exit
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for thread in self._pumps:  # the whole log, up to the end of the streams
            thread.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode


ACCESS = re.compile(r'^127\.0\.0\.1 "(\w+) (\S+)"(?: Range=(\S+))? (\d{3}) (\d+)$')


# A client that cancels a request (Neuroglancer drops fetches it no longer needs; the browser
# quits with some in flight) ends its connection: one log line, no traceback.
CLIENT_GONE = re.compile(r"^127\.0\.0\.1 connection ended: \[Errno (32|104)\] ")


def parse_log(lines: list[str]) -> list[tuple[str, str, str | None, int]]:
    """The access lines of the server's log; any other line but a client gone fails."""
    out = []
    for line in lines:
        if CLIENT_GONE.match(line):
            continue
        m = ACCESS.match(line)
        assert m, f"unexpected line in the server's log: {line!r}"
        out.append((m.group(1), m.group(2), m.group(3), int(m.group(4))))
    return out


# --------------------------------------------------------------- browser
def open_browser(chrome: str, chromedriver: str, profile: str, url: str):
    """Headless Chromium (selenium) showing ``url``, its console logged."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.get(url)
    return driver


def screenshot_when_loaded(viewer, size: tuple[int, int], timeout: float = 45):
    """Neuroglancer's own screenshot of the panel; the client takes it once every visible
    chunk is loaded (its "ready" state)."""
    with viewer.config_state.txn() as s:
        s.show_ui_controls = False
        s.show_panel_borders = False
        s.viewer_size = list(size)
    try:
        for _ in range(5):  # the first attempt may precede the resize
            replies: queue.Queue = queue.Queue()
            viewer.async_screenshot(replies.put)
            try:
                shot = replies.get(timeout=timeout).screenshot
            except queue.Empty:
                raise AssertionError(
                    f"Neuroglancer did not finish loading in {timeout} s") from None
            if (shot.width, shot.height) == tuple(size):
                return shot
        raise AssertionError(f"screenshot size {shot.width}x{shot.height}, wanted {size}")
    finally:
        with viewer.config_state.txn() as s:
            s.show_ui_controls = True
            s.show_panel_borders = True
            s.viewer_size = None


def voxel_to_pixel(x: int, y: int) -> tuple[int, int]:
    """Pixel (column, row) whose centre is voxel (x, y) at 1 pixel per voxel."""
    return x - CENTRE[0] + PANEL[0] // 2, y - CENTRE[1] + PANEL[1] // 2


# ------------------------------------------------------------------ test
def test_neuroglancer_draws_shardvol_volumes(tmp_path):
    chrome, chromedriver = _browser()
    import neuroglancer
    from PIL import Image

    t0 = time.monotonic()
    image, seg = make_data()
    write_volumes(str(tmp_path / "data"), image, seg)
    expected = Volume(str(tmp_path / "data" / "image"))[:, :, Z:Z + 1][:, :, 0, 0]  # as decoded

    server = ServeProcess(str(tmp_path / "data"))
    neuroglancer.set_server_bind_address("127.0.0.1")
    driver = None
    try:
        base = server.base_url
        assert server.printed[2:4] == [f"  precomputed://{base}/image",
                                       f"  precomputed://{base}/seg"]
        viewer = neuroglancer.Viewer()
        with viewer.txn() as s:
            s.layers["image"] = neuroglancer.ImageLayer(source=f"precomputed://{base}/image")
            s.layers["segmentation"] = neuroglancer.SegmentationLayer(
                source=f"precomputed://{base}/seg", selected_alpha=1.0,
                segment_colors={sid: "#{:02x}{:02x}{:02x}".format(*rgb)
                                for sid, _, _, rgb in SEGMENTS},
            )
            s.dimensions = neuroglancer.CoordinateSpace(
                names=["x", "y", "z"], units="nm", scales=RESOLUTION)
            s.layout = "xy"
            s.position = [CENTRE[0], CENTRE[1], Z + 0.5]  # pixel centres on voxel centres
            s.cross_section_scale = 1  # 4 nm (one voxel) per pixel
            s.show_axis_lines = False

        driver = open_browser(chrome, chromedriver, str(tmp_path / "chrome-profile"),
                              viewer.get_viewer_url())

        shot = screenshot_when_loaded(viewer, PANEL)
        time.sleep(0.5)  # the page re-lays out after the screenshot's resize
        page_png = driver.get_screenshot_as_png()
        console = driver.get_log("browser")
    finally:
        if driver is not None:
            driver.quit()
        neuroglancer.stop()
        exit_code = server.stop()
    elapsed = time.monotonic() - t0

    save = os.environ.get("SHARDVOL_NEUROGLANCER_PNG")
    (tmp_path / "neuroglancer.png").write_bytes(page_png)
    if save:
        with open(save, "wb") as f:
            f.write(page_png)

    # ---- the panel shows the data
    pixels = np.asarray(Image.open(io.BytesIO(shot.image)).convert("RGB")).astype(int)
    assert pixels.shape == (PANEL[1], PANEL[0], 3)
    x0, y0 = voxel_to_pixel(0, 0)
    x1, y1 = voxel_to_pixel(SIZE[0], SIZE[1])
    panel = pixels[y0:y1, x0:x1].transpose(1, 0, 2)  # (x, y, rgb) like the volume
    assert len(np.unique(panel.reshape(-1, 3), axis=0)) > 150, "the panel looks blank"

    labels = seg[:, :, Z]
    for sid, (cx, cy), r, rgb in SEGMENTS:
        inside = labels == sid
        drawn = np.all(np.abs(panel - rgb) <= 2, axis=-1)
        # the disc is drawn in its colour where its voxels are (edges may antialias)
        assert drawn[cx - r // 2:cx + r // 2, cy - r // 2:cy + r // 2].all(), f"segment {sid}"
        assert abs(int(drawn.sum()) - int(inside.sum())) < 0.02 * inside.sum(), f"segment {sid}"
        assert not drawn[~inside].any(), f"segment {sid}'s colour outside its disc"

    # image pixels (away from the discs and the volume's outline) equal the voxels
    background = np.ones(labels.shape, bool)
    for _sid, (cx, cy), r, _ in SEGMENTS:
        xx, yy = np.ogrid[: SIZE[0], : SIZE[1]]
        background &= (xx - cx) ** 2 + (yy - cy) ** 2 > (r + 2) ** 2
    background[:2] = background[-2:] = False
    background[:, :2] = background[:, -2:] = False
    gray = panel[background]
    assert (gray[:, 0] == gray[:, 1]).all() and (gray[:, 1] == gray[:, 2]).all()
    diff = np.abs(gray[:, 0] - expected[background].astype(int))
    assert np.mean(diff <= 3) > 0.99, f"image pixels differ from mip 0: {np.percentile(diff, 99)}"
    assert len(np.unique(gray[:, 0])) > 100

    # ---- the server: Range requests for the shards of both layers, no unexpected errors
    assert exit_code == 0, server.log
    log = parse_log(server.log)
    assert {m for m, *_ in log} == {"GET"}
    shard_reads = [(p, r, st) for _, p, r, st in log if p.endswith(".shard")]
    assert shard_reads and all(r and r.startswith("bytes=") and st == 206
                               for p, r, st in shard_reads), shard_reads
    for layer in ("image", "seg"):
        assert any(p.startswith(f"/{layer}/4_4_40/") for p, _, _ in shard_reads), layer
    # A 404 is acceptable only for a shard file that does not exist (a shard whose
    # chunks were all empty is never written; Neuroglancer reads it as empty).
    data_dir = tmp_path / "data"
    for _, path, _, status in log:
        if status == 404:
            assert path.endswith(".shard") and not (data_dir / path.lstrip("/")).exists(), path
        else:
            assert status in (200, 206), (path, status)

    # ---- the browser logged no errors (the viewer's own favicon aside)
    severe = [e for e in console if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
    assert not severe, severe
    assert elapsed < 60, f"took {elapsed:.0f} s"
