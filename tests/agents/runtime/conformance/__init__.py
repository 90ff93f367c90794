"""Conformance vectors from ZeroClaw and Claw Code (``../shared/conformance`` beside the project).

The folder is not part of the repository: these tests skip when it is absent. Set
``AGENTSITE_CONFORMANCE_DIR`` to read the vectors from elsewhere.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[4]
CONFORMANCE_DIR = Path(os.environ.get("AGENTSITE_CONFORMANCE_DIR") or ROOT.parent / "shared" / "conformance")


def load(filename: str) -> list[dict[str, Any]]:
    path = CONFORMANCE_DIR / filename
    if not path.is_file():
        return []
    return json.loads(path.read_text(encoding="utf-8"))


def vectors(filename: str, *fns: str, skip: dict[str, str] | None = None) -> list[Any]:
    """pytest params for the vectors of ``filename`` whose ``fn`` is one of ``fns`` (all when
    none is given). ``skip`` maps a vector id to the reason it is a deliberate deviation; those
    are reported as xfail-strict-free skips so the reason shows in the run."""
    skip = skip or {}
    rows = [v for v in load(filename) if not fns or v["fn"] in fns]
    if not rows:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{filename} not found in {CONFORMANCE_DIR}"), id="absent")]
    params = []
    for v in rows:
        marks = [pytest.mark.skip(reason=skip[v["id"]])] if v["id"] in skip else []
        params.append(pytest.param(v, id=v["id"], marks=marks))
    return params


def approx_equal(a: Any, b: Any) -> bool:
    """JSON equality with floats compared to 1e-9 and the ``"NaN"`` marker honoured."""
    if isinstance(a, float) or isinstance(b, float):
        if b == "NaN" or a == "NaN":
            return (a == "NaN" or (isinstance(a, float) and math.isnan(a))) and (
                b == "NaN" or (isinstance(b, float) and math.isnan(b)))
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(approx_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(approx_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b
