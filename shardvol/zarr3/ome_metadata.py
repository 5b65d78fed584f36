"""OME-Zarr 0.5 image metadata: the ``ome`` attributes of a Zarr v3 group, parsed and built.

The contract is the NGFF 0.5 specification (https://ngff.openmicroscopy.org/0.5/):
``attributes.ome.version`` is "0.5" and ``attributes.ome.multiscales[0]`` holds
``axes`` (2-5 of them: time?, channel?, then space, in array order) and
``datasets`` (one array path per resolution level, highest resolution first,
each with exactly one ``scale`` transformation, optionally followed by one
``translation``), and optionally transformations shared by every level.

shardvol reads images with exactly three space axes named ``x``, ``y`` and ``z``,
at most one channel axis and at most one time axis (of length 1, checked
against the arrays).  An axis without a ``type`` is typed by its name (x, y, z:
space; c: channel; t: time); other types are refused.  Space units are any of
the specification's length units (none: nanometres); a level's voxel size is
its ``scale`` times the shared ``scale``, in nanometres.

Voxel positions: OME-Zarr places the *centre* of array element ``i`` at
``scale * i + translation``; precomputed and Neuroglancer place voxel ``i``'s
lower *corner* at ``(voxel_offset + i) * resolution``.  shardvol writes
``translation = (voxel_offset + 0.5) * resolution`` (so both show the same
voxels at the same place, as Neuroglancer shows OME-Zarr) and reads
``voxel_offset = floor(translation / scale)``: the voxel, in that level's grid,
holding the centre of array element 0 (0 without a translation).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardvol.errors import InfoError, InvalidKeyError
from shardvol.kvstore import check_key
from shardvol.zarr3.codecs import JSON
from shardvol.zarr3.metadata import ArrayMetadata

OME_VERSION = "0.5"
FRAME = "xyz"  # the space axes, in the order shardvol's (x, y, z, channel) frame has them
_SI = {"yocto": -24, "zepto": -21, "atto": -18, "femto": -15, "pico": -12, "nano": -9,
       "micro": -6, "milli": -3, "centi": -2, "deci": -1, "": 0, "hecto": 2, "kilo": 3,
       "mega": 6, "giga": 9, "tera": 12, "peta": 15, "exa": 18, "zetta": 21, "yotta": 24}
#: the specification's units of space axes, in nanometres
SPACE_UNITS: dict[str, float] = {
    **{f"{p}meter": 10.0 ** (e + 9) for p, e in _SI.items()},
    "angstrom": 0.1, "foot": 0.3048e9, "inch": 0.0254e9, "mile": 1609.344e9, "yard": 0.9144e9,
    "parsec": 3.0856775814913673e25,
}  # fmt: skip
AXIS_TYPES = ("time", "channel", "space")  # in the order the specification wants them
_TYPE_OF_NAME = {"x": "space", "y": "space", "z": "space", "c": "channel", "t": "time"}
_EPS = 1e-6  # tolerance of translation / scale when it is read as a voxel offset


@dataclass(frozen=True)
class Axis:
    name: str
    type: str  # one of AXIS_TYPES
    unit: str | None


@dataclass(frozen=True)
class Level:
    """One resolution level: its array's path and its voxel geometry in the (x, y, z) frame."""

    path: str
    resolution: tuple[float, float, float]  # nanometres per voxel
    voxel_offset: tuple[int, int, int]

    @property
    def key(self) -> str:
        """The level's name among the others (its path), as a precomputed scale's key."""
        return self.path


@dataclass(frozen=True)
class Multiscale:
    """The first multiscale image of a group's ``ome`` attributes, checked."""

    axes: tuple[Axis, ...]
    levels: tuple[Level, ...]
    name: str | None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    def index(self, kind: str) -> int | None:
        """Array axis of ``kind``: "x", "y", "z" (the space axes), "channel" or "time"."""
        for i, a in enumerate(self.axes):
            if (a.type == "space" and a.name.lower() == kind) or a.type == kind:
                return i
        return None

    def check_arrays(self, arrays: Sequence[ArrayMetadata], source: str) -> None:
        """Refuse arrays that do not match the axes: dimensions, names, data type, channels,
        time points."""
        first = arrays[0]
        for level, meta in zip(self.levels, arrays):
            where = f"{source}: dataset {level.path!r}"
            if meta.ndim != len(self.axes):
                raise InfoError(
                    f"{where} has {meta.ndim} dimensions {list(meta.shape)}, but 'axes' has "
                    f"{len(self.axes)} entries {list(self.names)}"
                )
            if meta.dimension_names is not None and tuple(meta.dimension_names) != self.names:
                raise InfoError(
                    f"{where}: dimension_names {list(meta.dimension_names)} do not match the "
                    f"axes {list(self.names)}"
                )
            if meta.dtype != first.dtype:
                raise InfoError(
                    f"{where} holds {meta.dtype}, dataset {self.levels[0].path!r} {first.dtype}"
                )
            c, t = self.index("channel"), self.index("time")
            if c is not None and meta.shape[c] != first.shape[c]:
                raise InfoError(
                    f"{where} has {meta.shape[c]} channels, dataset {self.levels[0].path!r} "
                    f"{first.shape[c]}: channels are not downsampled"
                )
            if t is not None and meta.shape[t] != 1:
                raise InfoError(
                    f"{where} has {meta.shape[t]} time points along axis {self.names[t]!r}; "
                    "shardvol reads images of one time point"
                )


# ------------------------------------------------------------------------ parsing


def parse_multiscale(attributes: Mapping[str, Any], source: str) -> Multiscale:
    """The first entry of ``attributes["ome"]["multiscales"]``, checked (InfoError naming
    the field otherwise); ``source`` names the group in errors."""
    ome = attributes.get("ome")
    if not isinstance(ome, Mapping):
        raise InfoError(f"{source}: no 'ome' object in the attributes: not an OME-Zarr 0.5 image")
    version = ome.get("version")
    if version != OME_VERSION:
        raise InfoError(
            f"{source}: attributes.ome.version is {version!r}; shardvol reads OME-Zarr "
            f"{OME_VERSION!r} (Zarr v3)"
        )
    multiscales = ome.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales:
        raise InfoError(f"{source}: attributes.ome.multiscales must be a non-empty list")
    ms = multiscales[0]
    where = f"{source}: attributes.ome.multiscales[0]"
    if not isinstance(ms, Mapping):
        raise InfoError(f"{where} must be an object")
    axes = _parse_axes(ms.get("axes"), f"{where}.axes")
    datasets = ms.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise InfoError(f"{where}.datasets must be a non-empty list of levels")
    shared = ms.get("coordinateTransformations")
    g_scale, g_shift = (
        ((1.0,) * len(axes), (0.0,) * len(axes)) if shared is None
        else _parse_transforms(shared, len(axes), f"{where}.coordinateTransformations")
    )  # fmt: skip
    levels = []
    for i, d in enumerate(datasets):
        here = f"{where}.datasets[{i}]"
        if not isinstance(d, Mapping):
            raise InfoError(f"{here} must be an object")
        path = _parse_path(d.get("path"), f"{here}.path")
        if "coordinateTransformations" not in d:
            raise InfoError(f"{here} has no coordinateTransformations (a 'scale' is required)")
        scale, shift = _parse_transforms(
            d["coordinateTransformations"], len(axes), f"{here}.coordinateTransformations"
        )
        # the shared transformations apply after the level's own
        scale = tuple(a * b for a, b in zip(scale, g_scale))
        shift = tuple(t * s + g for t, s, g in zip(shift, g_scale, g_shift))
        levels.append(_level(path, axes, scale, shift))
    _check_levels(levels, f"{where}.datasets")
    name = ms.get("name")
    return Multiscale(tuple(axes), tuple(levels), name if isinstance(name, str) else None)


def _parse_axes(value: Any, where: str) -> list[Axis]:
    if not isinstance(value, list) or not 2 <= len(value) <= 5:
        raise InfoError(f"{where} must be a list of 2 to 5 axes, got {value!r}")
    axes = []
    for i, a in enumerate(value):
        if not isinstance(a, Mapping) or not isinstance(a.get("name"), str) or not a["name"]:
            raise InfoError(f"{where}[{i}] must be an object with a 'name', got {a!r}")
        name = a["name"]
        kind = a.get("type", _TYPE_OF_NAME.get(name.lower()))
        if kind not in AXIS_TYPES:
            raise InfoError(
                f"{where}[{i}] ({name!r}) has type {kind!r}; shardvol reads axes of type "
                f"{', '.join(AXIS_TYPES)}"
            )
        unit = a.get("unit")
        if unit is not None and not isinstance(unit, str):
            raise InfoError(f"{where}[{i}] ({name!r}): unit must be a string, got {unit!r}")
        if kind == "space" and unit is not None and unit not in SPACE_UNITS:
            raise InfoError(
                f"{where}[{i}] ({name!r}): unit {unit!r} is not a length unit of the "
                "specification (such as 'nanometer', 'micrometer')"
            )
        axes.append(Axis(name, kind, unit))
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise InfoError(f"{where}: axis names must be unique, got {names}")
    ranks = [AXIS_TYPES.index(a.type) for a in axes]
    if ranks != sorted(ranks):
        raise InfoError(
            f"{where}: axes {names} must be ordered time, channel, then space (as the "
            "specification requires)"
        )
    space = sorted(a.name.lower() for a in axes if a.type == "space")
    if space != sorted(FRAME):
        raise InfoError(
            f"{where}: shardvol reads images with three space axes named x, y and z, "
            f"got space axes {[a.name for a in axes if a.type == 'space']}"
        )
    for kind in ("channel", "time"):
        if sum(a.type == kind for a in axes) > 1:
            raise InfoError(f"{where}: at most one {kind} axis, got {names}")
    return axes


def _parse_path(value: Any, where: str) -> str:
    try:
        return check_key(value)
    except InvalidKeyError:
        raise InfoError(
            f"{where} must be a relative path inside the group, got {value!r}"
        ) from None


def _vector(t: Mapping[str, Any], field: str, n: int, where: str) -> tuple[float, ...]:
    if field not in t:
        if "path" in t:
            raise InfoError(f"{where}: a {field} stored in an array ('path') is not supported")
        raise InfoError(f"{where}: no {field!r} list")
    v = t[field]
    if (
        not isinstance(v, list)
        or len(v) != n
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        or not all(math.isfinite(x) for x in v)
    ):
        raise InfoError(f"{where}.{field} must be {n} numbers (one per axis), got {v!r}")
    return tuple(float(x) for x in v)


def _parse_transforms(
    value: Any, n: int, where: str
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(scale, translation)`` of a list of exactly one scale, then at most one translation."""
    if not isinstance(value, list) or not value:
        raise InfoError(f"{where} must be a non-empty list of transformations")
    kinds = [t.get("type") if isinstance(t, Mapping) else None for t in value]
    if kinds not in (["scale"], ["scale", "translation"]):
        raise InfoError(
            f"{where} must be one 'scale' optionally followed by one 'translation', "
            f"got types {kinds}"
        )
    scale = _vector(value[0], "scale", n, f"{where}[0]")
    if any(s <= 0 for s in scale):
        raise InfoError(f"{where}[0].scale must be positive, got {list(scale)}")
    shift = _vector(value[1], "translation", n, f"{where}[1]") if len(value) == 2 else (0.0,) * n
    return scale, shift


def _level(path: str, axes: Sequence[Axis], scale: Sequence[float],
           shift: Sequence[float]) -> Level:
    res, offset = [], []
    for d in FRAME:
        i = next(k for k, a in enumerate(axes) if a.type == "space" and a.name.lower() == d)
        unit = SPACE_UNITS[axes[i].unit or "nanometer"]
        res.append(float(f"{scale[i] * unit:.12g}"))  # 0.1 um: 100 nm, not 100.00000000000001
        offset.append(math.floor(shift[i] / scale[i] + _EPS))
    return Level(path, tuple(res), tuple(offset))  # type: ignore[arg-type]  # 3 axes


def _check_levels(levels: Sequence[Level], where: str) -> None:
    paths = [lv.path for lv in levels]
    if len(set(paths)) != len(paths):
        raise InfoError(f"{where}: paths must be unique, got {paths}")
    for prev, lv in itertools.pairwise(levels):
        finer = [a < b * (1 - 1e-9) for a, b in zip(lv.resolution, prev.resolution)]
        if any(finer) or lv.resolution == prev.resolution:
            raise InfoError(
                f"{where}: level {lv.path!r} (voxel size {_nm(lv.resolution)}) is not coarser "
                f"than level {prev.path!r} ({_nm(prev.resolution)}): levels go from the highest "
                "resolution down, no axis finer than the level before"
            )


def _nm(res: Sequence[float]) -> str:
    return "x".join(f"{r:g}" for r in res) + " nm"


# ------------------------------------------------------------------------ building


def array_axes(channels: int) -> list[str]:
    """Array axis names of an image shardvol writes: ``c`` (when more than one channel), then
    ``z``, ``y``, ``x``: the specification's order, and the (x, y, z, channel) frame's
    Fortran layout in C order."""
    return ["c", "z", "y", "x"] if channels > 1 else ["z", "y", "x"]


def image_attributes(
    levels: Sequence[Level], channels: int, name: str | None = None
) -> dict[str, JSON]:
    """The ``attributes`` of an image group whose levels are ``levels`` (axes as
    :func:`array_axes`; units nanometres; translations as in the module docstring)."""
    names = array_axes(channels)
    axes: list[JSON] = [
        {"name": "c", "type": "channel"} if n == "c"
        else {"name": n, "type": "space", "unit": "nanometer"}
        for n in names
    ]  # fmt: skip
    datasets: list[JSON] = []
    for lv in levels:
        by_axis = dict(zip(FRAME, zip(lv.resolution, lv.voxel_offset)))
        scale = [1 if n == "c" else _number(by_axis[n][0]) for n in names]
        shift = [0 if n == "c" else _number((by_axis[n][1] + 0.5) * by_axis[n][0]) for n in names]
        datasets.append({
            "path": lv.path,
            "coordinateTransformations": [
                {"type": "scale", "scale": scale}, {"type": "translation", "translation": shift},
            ],
        })  # fmt: skip
    ms: dict[str, JSON] = {"axes": axes, "datasets": datasets}
    if name:
        ms["name"] = name
    return {"ome": {"version": OME_VERSION, "multiscales": [ms]}}


def _number(v: float) -> int | float:
    v = float(v)
    return int(v) if v.is_integer() else v


__all__ = [
    "OME_VERSION",
    "SPACE_UNITS",
    "Axis",
    "Level",
    "Multiscale",
    "array_axes",
    "image_attributes",
    "parse_multiscale",
]
