"""What a benchmark writes: evaluation points and other rows as CSV (pandas), JSON, the machine they ran on."""

import contextlib
import importlib.metadata
import json
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import torch as th


def cpu_info() -> dict[str, str]:
    """The first CPU's ``model name``, ``cpu family`` and ``model`` fields of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as file:
        for line in file:
            key, _, value = line.partition(":")
            if not key.strip():  # the first CPU's block ends
                break
            if key.strip() in ("model name", "cpu family", "model"):
                fields[key.strip()] = value.strip()
    return fields


def cpu_generation() -> str | None:
    """The CPU's family and model numbers, e.g. "family 25 model 17": one model name ("AMD EPYC") covers several
    generations, whose speeds differ, so runs are compared only within one (None where unknown)."""
    info = cpu_info()
    return f"family {info['cpu family']} model {info['model']}" if "cpu family" in info and "model" in info else None


def machine_id(device: str = "cpu") -> str:
    """A short name of this machine's compute: CPU model and count, plus the GPU when the learner uses one."""
    # No /proc/cpuinfo, or no model name in it: keep platform's name.
    cpu = cpu_info().get("model name") or platform.processor() or platform.machine()
    name = f"{cpu} x{os.cpu_count()}"
    if device.startswith("cuda") and th.cuda.is_available():
        name += f" + {th.cuda.get_device_name(0)}"
    return name


@dataclass
class EvalPoint:
    algo: str
    env: str
    seed: int
    steps: int
    wall_seconds: float
    eval_mean: float
    eval_std: float
    status: str = "ok"
    error: str = ""
    device: str = ""
    machine: str = ""


EVAL_COLUMNS = [field.name for field in fields(EvalPoint)]
TEXT_COLUMNS = {"algo": str, "env": str, "status": str, "error": str, "device": str, "machine": str}


def machine_description(device: str = "cpu") -> dict[str, Any]:
    return {
        "name": machine_id(device),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_generation": cpu_generation(),
        "cpus": os.cpu_count(),
        "torch_threads": th.get_num_threads(),
        "cuda": th.cuda.get_device_name(0) if th.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
        "software": software_versions(),
    }


SOFTWARE = ("torch", "stable_baselines3", "sb3_contrib", "rl_zoo3", "gymnasium", "mujoco", "ale_py", "ray", "numpy")


def software_versions() -> dict[str, str | None]:
    """Python's and the installed versions of the packages a result depends on (None where not installed), so that
    "same machine kind and software" can be checked from the JSON."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_differences(previous: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """What differs between the machines a table's kept runs came from (its JSON's ``machine``, with its
    ``earlier_sittings``) and this one: the machine's name and each software version; an older JSON without
    versions says so."""
    differences: list[str] = []
    for sitting in sittings(previous):
        found = []
        if sitting.get("name") != current["name"]:
            found.append(f"machine {sitting.get('name')!r} -> {current['name']!r}")
        before = sitting.get("software")
        if before is None:
            found.append("software versions not recorded for the kept runs")
        else:
            found += [
                f"{package} {before.get(package)} -> {version}"
                for package, version in current["software"].items()
                if before.get(package) != version
            ]
        differences += [difference for difference in found if difference not in differences]
    return differences


def sittings(machine: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each sitting's machine description in a JSON's ``machine``: the earlier ones that differ, then the last."""
    if not machine:
        return []
    last = {key: value for key, value in machine.items() if key != "earlier_sittings"}
    return [*machine.get("earlier_sittings", []), last]


def merge_sittings(previous: dict[str, Any] | None, current: dict[str, Any]) -> dict[str, Any]:
    """The ``machine`` of a table that keeps the runs described by ``previous`` and adds runs made on ``current``:
    ``current``, with the earlier sittings whose machine or software differ from it under ``earlier_sittings``."""
    earlier: list[dict[str, Any]] = []
    for sitting in sittings(previous):
        if machine_differences(sitting, current) and sitting not in earlier:
            earlier.append(sitting)
    return {**current, "earlier_sittings": earlier} if earlier else current


def write_rows(path: Path, rows: Iterable[dict[str, Any]], columns: list[str] | None = None, na_rep: str = "") -> None:
    """
    Rows as a CSV: ``columns``, or the union of the rows' keys in their order; each value as Python writes it (an
    int stays an int in a column with gaps), ``na_rep`` where a row has no value or a NaN.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(list(rows), columns=columns, dtype=object)
    frame.to_csv(path, index=False, na_rep=na_rep, lineterminator="\r\n")


def write_csv(points: list[EvalPoint], path: Path) -> None:
    write_rows(path, map(asdict, points), EVAL_COLUMNS, na_rep="nan")


def read_csv(path: Path) -> list[EvalPoint]:
    """The points of ``path``; an older file without the last columns gets their defaults."""
    frame = pd.read_csv(path, dtype=TEXT_COLUMNS, keep_default_na=False, na_values=["nan"], float_precision="round_trip")
    return [EvalPoint(**row) for row in frame.to_dict("records")]


def write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
