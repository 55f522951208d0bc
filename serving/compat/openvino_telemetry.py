"""OpenVINO without its usage telemetry.

``import openvino`` imports its model converter, and that import sends a usage event to Google Analytics
and writes a client id under ``~/intel`` (openvino-telemetry): unless a consent file there declines
(its ``opt_in_out --opt_out``, a file in the user's home) or ``CI=true`` is set, consent is assumed. A
model server sends nothing about its host unasked, and in a pod with a read-only root the attempt logs
three warnings. Here the consent check declines, as it does in CI, so nothing is written or sent.
OpenVINO is optional (not in the CPU image): where it is not installed there is nothing to patch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

stock: dict[str, Any] = {}  # ``OptInChecker.check`` as installed, once ``apply`` has replaced it (tests/test_compat.py)


def declined(self: Any, enable_opt_in_dialog: bool, disable_in_ci: bool = False) -> Any:
    """``OptInChecker.check`` answering what it answers in CI, without reading or writing any file."""
    from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult

    return ConsentCheckResult.DECLINED


def apply() -> None:
    """OpenVINO's telemetry is declined in this process from now on; call it before anything imports ``openvino``."""
    if importlib.util.find_spec("openvino_telemetry") is None:
        return
    from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker

    if not hasattr(OptInChecker, "check") or not hasattr(ConsentCheckResult, "DECLINED"):
        raise RuntimeError("openvino-telemetry changed its consent check: serving/compat/openvino_telemetry.py no longer applies")
    if OptInChecker.check is not declined:
        stock["check"] = OptInChecker.check
        OptInChecker.check = declined
