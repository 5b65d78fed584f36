"""Neuroglancer segment properties: the ``info`` of a ``neuroglancer_segment_properties``
directory, with its inline table of property values by uint64 segment id.

Example::

    props = SegmentProperties(
        np.array([5, 9], np.uint64), labels=["axon", "soma"],
        numbers={"volume": np.array([1.5, 2.0], np.float32)},
        tags={9: ["big"]}, tag_descriptions={"big": "more than 1 um^3"})
    write_segment_properties(open_store("memory://p"), props)
    read_segment_properties(open_store("memory://p")).numbers["volume"]

Everything the specification requires is checked both ways (ids unique base-10 uint64s,
one value per id, at most one ``label``/``description``/``tags`` property, tag indices
increasing and in range, number values of their ``data_type``): what breaks a rule is an
InfoError naming the document and the property.  Tags written must also be what the
specification recommends (no spaces, no leading ``#``).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from shardvol.errors import InfoError
from shardvol.jsondoc import finite_number, load_json
from shardvol.kvstore import KVStore
from shardvol.precomputed.info_file import INFO_KEY

PROPERTIES_TYPE = "neuroglancer_segment_properties"
TYPES = ("label", "description", "string", "tags", "number")
NUMBER_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")
_SINGLE = ("label", "description", "tags")  # types of which there is at most one property
_TAG_MEMBERS = ("tags", "tag_descriptions")
# numbers at least this large round to an infinite float32
_FLOAT32_LIMIT = float(2**128 - 2**103)


class SegmentProperties:
    """Inline segment properties: ``ids`` (uint64, unique, in stored order) and
    ``properties``, the specification's property objects in order, each with ``"values"``
    aligned with ``ids`` (numbers as a numpy array of their ``data_type``, tags as lists
    of indices into ``"tags"``, the others as lists of strings).

    Built from those objects (``properties``), from columns by keyword, or both (the
    keyword columns follow, as ``label``, ``description``, ``tags``, then ``strings``
    and ``numbers`` in their order):

    - ``labels``, ``descriptions``: one string per id;
    - ``strings``: ``{property id: one string per id}``;
    - ``numbers``: ``{property id: numpy array, one value per id}``, its dtype one of
      :data:`NUMBER_TYPES` (the property's ``data_type``);
    - ``tags``: the tag names of each id, as one list per id or ``{segment id: names}``
      (ids not in it have none); ``tag_names``: the order of the tags (default: sorted),
      ``tag_descriptions``: ``{tag: description}``;
    - ``property_descriptions``: ``{property id: description}`` (not for tags).

    Keyword columns get the property ids ``"label"``, ``"description"`` and ``"tags"``.
    """

    def __init__(
        self,
        ids: Any,
        properties: Sequence[Mapping[str, Any]] = (),
        *,
        labels: Sequence[str] | None = None,
        descriptions: Sequence[str] | None = None,
        strings: Mapping[str, Sequence[str]] | None = None,
        numbers: Mapping[str, np.ndarray] | None = None,
        tags: Sequence[Sequence[str]] | Mapping[int, Sequence[str]] | None = None,
        tag_names: Sequence[str] | None = None,
        tag_descriptions: Mapping[str, str] | None = None,
        property_descriptions: Mapping[str, str] | None = None,
        source: str = "segment properties",
    ) -> None:
        self.ids = _ids(ids, source)
        described = dict(property_descriptions or {})
        props = [dict(p) if isinstance(p, Mapping) else p for p in properties]
        if labels is not None:
            props.append(_column("label", "label", list(labels), described))
        if descriptions is not None:
            props.append(_column("description", "description", list(descriptions), described))
        if tags is not None:
            props.append(_tags_property(self.ids, tags, tag_names, tag_descriptions, source))
        elif tag_names is not None or tag_descriptions is not None:
            raise InfoError(f"{source}: tag_names and tag_descriptions need tags")
        for pid, values in (strings or {}).items():
            props.append(_column(pid, "string", list(values), described))
        for pid, column in (numbers or {}).items():
            props.append(_number_column(pid, column, described, source))
        unused = set(described) - {p.get("id") for p in props if isinstance(p, dict)}
        if unused:
            raise InfoError(f"{source}: property_descriptions names no property: {sorted(unused)}")
        self.properties: list[dict[str, Any]] = _checked(props, len(self.ids), source)

    # -- columns -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{p['id']}:{p['type']}" for p in self.properties)
        return f"SegmentProperties({len(self.ids)} ids; {kinds})"

    def _of_type(self, kind: str) -> dict[str, Any] | None:
        return next((p for p in self.properties if p["type"] == kind), None)

    @property
    def labels(self) -> list[str] | None:
        """The label of each id (None: no label property)."""
        p = self._of_type("label")
        return None if p is None else list(p["values"])

    @property
    def descriptions(self) -> list[str] | None:
        """The description of each id (None: no description property)."""
        p = self._of_type("description")
        return None if p is None else list(p["values"])

    @property
    def strings(self) -> dict[str, list[str]]:
        """``{property id: string of each id}`` of the ``string`` properties."""
        return {p["id"]: list(p["values"]) for p in self.properties if p["type"] == "string"}

    @property
    def numbers(self) -> dict[str, np.ndarray]:
        """``{property id: value of each id}`` of the ``number`` properties."""
        return {p["id"]: p["values"].copy() for p in self.properties if p["type"] == "number"}

    @property
    def tag_names(self) -> list[str] | None:
        """The tags, in stored order (None: no tags property)."""
        p = self._of_type("tags")
        return None if p is None else list(p["tags"])

    @property
    def tag_descriptions(self) -> dict[str, str] | None:
        """``{tag: description}`` (None: no tags property, or no tag descriptions)."""
        p = self._of_type("tags")
        if p is None or "tag_descriptions" not in p:
            return None
        return dict(zip(p["tags"], p["tag_descriptions"]))

    @property
    def tags(self) -> list[list[str]] | None:
        """The tag names of each id (None: no tags property)."""
        p = self._of_type("tags")
        if p is None:
            return None
        return [[p["tags"][i] for i in indices] for indices in p["values"]]

    def property_description(self, property_id: str) -> str | None:
        """The ``description`` member of the property ``property_id`` (None if it has none);
        KeyError if there is no such property."""
        for p in self.properties:
            if p["id"] == property_id:
                return p.get("description")
        raise KeyError(property_id)

    # -- JSON ----------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, doc: Any, source: str = "segment properties") -> SegmentProperties:
        """Parse a segment properties ``info`` document (InfoError naming ``source``)."""
        if not isinstance(doc, dict):
            raise InfoError(f"{source}: must be a JSON object, got {type(doc).__name__}")
        if doc.get("@type") != PROPERTIES_TYPE:
            raise InfoError(f"{source}: @type must be {PROPERTIES_TYPE!r}, got "
                            f"{doc.get('@type')!r}")
        inline = doc.get("inline", {"ids": [], "properties": []})
        if not isinstance(inline, dict):
            raise InfoError(f"{source}: 'inline' must be a JSON object")
        for name in ("ids", "properties"):
            if not isinstance(inline.get(name), list):
                raise InfoError(f"{source}: inline.{name} must be a JSON array")
        for i, s in enumerate(inline["ids"]):
            if not isinstance(s, str):
                raise InfoError(f"{source}: inline.ids[{i}] must be a base-10 string, got {s!r}")
        return cls(inline["ids"], inline["properties"], source=source)

    def to_dict(self) -> dict[str, Any]:
        """The ``info`` document (number values as JSON numbers of their data type)."""
        out = []
        for p in self.properties:
            q = dict(p)
            if p["type"] == "number":
                q["values"] = _number_json(p["values"])
            elif p["type"] == "tags":
                _check_tag_names(p)
                q["values"] = [list(v) for v in p["values"]]
            else:
                q["values"] = list(p["values"])
            out.append(q)
        return {"@type": PROPERTIES_TYPE,
                "inline": {"ids": [str(i) for i in self.ids.tolist()], "properties": out}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)


def read_segment_properties(kv: KVStore, source: str = "") -> SegmentProperties:
    """The segment properties whose directory is ``kv`` (its ``info``)."""
    name = f"{source or kv.url}/{INFO_KEY}"
    raw = kv.get(INFO_KEY)
    if raw is None:
        raise InfoError(f"no segment properties at {source or kv.url}: it has no 'info' file")
    return SegmentProperties.from_dict(load_json(raw, name), name)


def write_segment_properties(kv: KVStore, props: SegmentProperties) -> None:
    """Write ``props`` as the ``info`` of the directory ``kv`` (replacing it)."""
    text = props.to_json().encode()
    with kv.lock(INFO_KEY):
        kv.set(INFO_KEY, text)


# -- checks --------------------------------------------------------------------------------


def _ids(ids: Any, source: str) -> np.ndarray:
    """``ids`` (base-10 strings or integers) as a unique uint64 array."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
        if ids.ndim != 1:
            raise InfoError(f"{source}: ids must be 1-D, got shape {ids.shape}")
        if ids.dtype.kind == "i" and ids.size and int(ids.min()) < 0:
            raise InfoError(f"{source}: ids must be uint64, got {int(ids.min())}")
        out = ids.astype(np.uint64)
    else:
        out = np.array([_one_id(v, i, source) for i, v in enumerate(ids)], dtype=np.uint64)
    uniq, counts = np.unique(out, return_counts=True)
    if (counts > 1).any():
        raise InfoError(f"{source}: ids must be unique; {int(uniq[counts > 1][0])} appears "
                        f"{int(counts.max())} times")
    return out


def _one_id(v: Any, i: int, source: str) -> int:
    text = isinstance(v, str) and v.isascii() and v.isdigit()
    if not text and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
        raise InfoError(f"{source}: ids[{i}] must be a base-10 uint64, got {v!r}")
    n = int(v)
    if not 0 <= n < 1 << 64:
        raise InfoError(f"{source}: ids[{i}] = {n} is outside the uint64 range")
    return n


def _column(pid: str, kind: str, values: Any, described: dict[str, str]) -> dict[str, Any]:
    p: dict[str, Any] = {"id": pid, "type": kind}
    if pid in described:
        p["description"] = described[pid]
    p["values"] = values
    return p


def _number_column(pid: str, values: Any, described: dict[str, str],
                   source: str) -> dict[str, Any]:
    arr = np.asarray(values)
    if arr.dtype.name not in NUMBER_TYPES:
        raise InfoError(f"{source}: numbers[{pid!r}] must be an array of one of "
                        f"{NUMBER_TYPES}, got dtype {arr.dtype}")
    p = _column(pid, "number", arr, described)
    p["data_type"] = arr.dtype.name
    return {k: p[k] for k in ("id", "type", "description", "data_type", "values") if k in p}


def _tags_property(ids: np.ndarray, tags: Any, tag_names: Sequence[str] | None,
                   tag_descriptions: Mapping[str, str] | None, source: str) -> dict[str, Any]:
    """The ``tags`` property of per-id tag names (a list per id or ``{segment id: names}``)."""
    if isinstance(tags, Mapping):
        where = {int(k): i for i, k in enumerate(ids.tolist())}
        per_id: list[Sequence[str]] = [()] * len(ids)
        for seg, names in tags.items():
            if _one_id(seg, 0, source) not in where:
                raise InfoError(f"{source}: tags name segment {seg}, which is not in ids")
            per_id[where[int(seg)]] = names
    else:
        per_id = list(tags)
    for names in per_id:
        if isinstance(names, str):
            raise InfoError(f"{source}: the tags of each id must be a list of names, "
                            f"got the string {names!r}")
    used = {t for names in per_id for t in names}
    if not all(isinstance(t, str) for t in used):
        raise InfoError(f"{source}: tag names must be strings")
    vocab = list(tag_names) if tag_names is not None else sorted(
        used | set(tag_descriptions or {}))
    index = {t: i for i, t in enumerate(vocab)}
    missing = sorted((used | set(tag_descriptions or {})) - set(index))
    if missing:
        raise InfoError(f"{source}: tags {missing} are not in tag_names")
    p: dict[str, Any] = {"id": "tags", "type": "tags", "tags": vocab}
    if tag_descriptions is not None:
        p["tag_descriptions"] = [tag_descriptions.get(t, "") for t in vocab]
    p["values"] = [sorted({index[t] for t in names}) for names in per_id]
    return p


def _checked(props: list[Any], n: int, source: str) -> list[dict[str, Any]]:
    """The property objects, each checked against the specification (values aligned with
    ``n`` ids)."""
    seen: set[str] = set()
    single: dict[str, str] = {}
    out = []
    for i, p in enumerate(props):
        where = f"{source}: inline.properties[{i}]"
        if not isinstance(p, dict):
            raise InfoError(f"{where} must be a JSON object")
        pid = p.get("id")
        if not isinstance(pid, str):
            raise InfoError(f"{where}: 'id' must be a string, got {pid!r}")
        where = f"{where} ({pid!r})"
        if pid in seen:
            raise InfoError(f"{where}: property id {pid!r} is used twice")
        seen.add(pid)
        kind = p.get("type")
        if kind not in TYPES:
            raise InfoError(f"{where}: 'type' must be one of {TYPES}, got {kind!r}")
        if kind in _SINGLE:
            if kind in single:
                raise InfoError(f"{where}: a second {kind!r} property (the first is "
                                f"{single[kind]!r}); at most one is allowed")
            single[kind] = pid
        out.append(_checked_property(p, kind, n, where))
    return out


def _checked_property(p: dict[str, Any], kind: str, n: int, where: str) -> dict[str, Any]:
    q = dict(p)
    if "description" in p and (kind == "tags" or not isinstance(p["description"], str)):
        raise InfoError(f"{where}: 'description' must be a string, and absent for tags")
    if kind != "tags" and any(k in p for k in _TAG_MEMBERS):
        raise InfoError(f"{where}: 'tags' and 'tag_descriptions' are only for tags")
    if kind != "number" and "data_type" in p:
        raise InfoError(f"{where}: 'data_type' is only for numbers")
    values = p.get("values")
    if not isinstance(values, list) and not (
            kind == "number" and isinstance(values, np.ndarray) and values.ndim == 1):
        raise InfoError(f"{where}: 'values' must be an array (a 1-D numpy array for numbers)")
    if len(values) != n:
        raise InfoError(f"{where}: {len(values)} values for {n} ids")
    if kind == "tags":
        q["tags"], q["values"] = _checked_tags(p, values, where)
    elif kind == "number":
        q["values"] = _checked_numbers(p, values, where)
    else:
        bad = next((v for v in values if not isinstance(v, str)), None)
        if bad is not None:
            raise InfoError(f"{where}: values of a {kind} property must be strings, got {bad!r}")
        q["values"] = list(values)
    return q


def _checked_tags(p: dict[str, Any], values: Any, where: str) -> tuple[list[str], list]:
    tags = p.get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InfoError(f"{where}: 'tags' must be an array of strings")
    if len(set(tags)) != len(tags):
        raise InfoError(f"{where}: 'tags' lists a tag twice")
    descs = p.get("tag_descriptions")
    if descs is not None and (not isinstance(descs, list) or len(descs) != len(tags)
                              or not all(isinstance(d, str) for d in descs)):
        raise InfoError(f"{where}: 'tag_descriptions' must be {len(tags)} strings, one per tag")
    out = []
    for j, v in enumerate(values):
        if not isinstance(v, (list, tuple)) or not all(
                isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in v):
            raise InfoError(f"{where}: values[{j}] must be an array of tag indices, got {v!r}")
        idx = [int(t) for t in v]
        if any(not 0 <= t < len(tags) for t in idx):
            raise InfoError(f"{where}: values[{j}] = {idx} has a tag index outside "
                            f"[0, {len(tags)})")
        if any(a >= b for a, b in pairwise(idx)):
            raise InfoError(f"{where}: values[{j}] = {idx} must be in increasing order")
        out.append(idx)
    return list(tags), out


def _checked_numbers(p: dict[str, Any], values: Any, where: str) -> np.ndarray:
    dtype = p.get("data_type")
    if dtype not in NUMBER_TYPES:
        raise InfoError(f"{where}: 'data_type' must be one of {NUMBER_TYPES}, got {dtype!r}")
    if isinstance(values, np.ndarray):
        if values.dtype.name != dtype:
            raise InfoError(f"{where}: values have dtype {values.dtype}, not {dtype}")
        if dtype == "float32" and not np.isfinite(values).all():
            raise InfoError(f"{where}: float32 values must be finite (JSON has no NaN or inf)")
        return values.copy()
    lo, hi = (-_FLOAT32_LIMIT, _FLOAT32_LIMIT) if dtype == "float32" else (
        int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for j, item in enumerate(values):
        v = item.item() if isinstance(item, np.number) else item
        if not finite_number(v):
            raise InfoError(f"{where}: values[{j}] must be a finite number, got {item!r}")
        if dtype != "float32" and v != int(v):
            raise InfoError(f"{where}: values[{j}] = {v!r} is not an integer ({dtype})")
        if not lo <= v <= hi or (dtype == "float32" and abs(v) == hi):
            raise InfoError(f"{where}: values[{j}] = {v!r} is outside the {dtype} range")
    return np.array(values, dtype=dtype)


def _check_tag_names(p: dict[str, Any]) -> None:
    """Tags written must be usable in Neuroglancer's queries: no spaces, no leading '#'."""
    for t in p["tags"]:
        if not t or t.startswith("#") or any(c.isspace() for c in t):
            raise InfoError(f"tag {t!r} of property {p['id']!r}: tags must be non-empty, "
                            "without spaces and without a leading '#'")


def _number_json(values: np.ndarray) -> list:
    """Numbers as JSON values: integers, and float32 as the shortest decimal that reads
    back as the same float32."""
    if values.dtype == np.float32:
        return [float(str(v)) for v in values]
    return values.tolist()
