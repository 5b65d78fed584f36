"""The ``provenance`` file beside a precomputed volume's ``info`` (CloudVolume's and igneous's
record of where a layer came from and what made it).

A JSON object with ``description`` (a string), ``sources`` and ``owners`` (lists of
strings, no repeats) and ``processing`` (a list of objects, one per step, oldest first).
shardvol's own jobs (``downsample``, ``copy``) add a step when they finish, as igneous's
tasks do: ``{"method": {"task": ..., parameters}, "by": "shardvol VERSION (user@host)",
"date": "2026-11-28T13:00:00+00:00"}``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

from shardvol.errors import InfoError
from shardvol.jsondoc import load_json, plain
from shardvol.kvstore import KVStore

PROVENANCE_KEY = "provenance"


def empty() -> dict[str, Any]:
    return {"description": "", "sources": [], "owners": [], "processing": []}


def read_provenance(kv: KVStore) -> dict[str, Any]:
    """The provenance of the volume at ``kv`` (an empty one if it has none)."""
    raw = kv.get(PROVENANCE_KEY)
    if raw is None:
        return empty()
    doc = load_json(raw, f"{kv.url}/{PROVENANCE_KEY}")
    return check(doc, f"{kv.url}/{PROVENANCE_KEY}")


def check(doc: Any, source: str) -> dict[str, Any]:
    """``doc`` with the missing members added, if it is a provenance (else InfoError)."""
    if not isinstance(doc, dict):
        raise InfoError(f"{source}: a provenance is a JSON object, not {type(doc).__name__}")
    out = {**empty(), **doc}
    if not isinstance(out["description"], str):
        raise InfoError(f"{source}: 'description' must be a string")
    for name in ("sources", "owners"):
        items = out[name]
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise InfoError(f"{source}: {name!r} must be a list of strings")
        if len(set(items)) != len(items):
            raise InfoError(f"{source}: {name!r} holds a value twice")
    if not isinstance(out["processing"], list) or not all(
            isinstance(v, dict) for v in out["processing"]):
        raise InfoError(f"{source}: 'processing' must be a list of objects")
    return out


def write_provenance(kv: KVStore, doc: dict[str, Any]) -> None:
    """Write ``doc`` (checked first) as the volume's provenance, under the store's lock."""
    checked = check(plain(doc), f"{kv.url}/{PROVENANCE_KEY}")
    with kv.lock(PROVENANCE_KEY):
        kv.set(PROVENANCE_KEY, json.dumps(checked, indent=2).encode())


def record_step(kv: KVStore, method: dict[str, Any], sources: tuple[str, ...] = ()) -> None:
    """Add a processing step (and ``sources``, if not listed) to the volume's provenance;
    the read and the write are one step under the store's lock."""
    with kv.lock(PROVENANCE_KEY):
        doc = read_provenance(kv)
        doc["sources"] += [s for s in sources if s not in doc["sources"]]
        doc["processing"].append({
            "method": plain(method),
            "by": f"shardvol {_version()} ({_user()}@{os.uname().nodename})",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        })
        kv.set(PROVENANCE_KEY, json.dumps(doc, indent=2).encode())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # (10 ms to import)

    try:
        return version("shardvol")
    except PackageNotFoundError:
        return "(not installed)"


def _user() -> str:
    import getpass  # (a write's provenance only: not at import)

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
