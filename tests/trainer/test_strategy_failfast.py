"""The TPU image without TPUs fails fast with exit 2 and one line, instead of hanging in libtpu.

No TPU and no libtpu needed: the chip count, libtpu's presence and the TensorFlow probe are injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tpujob_trainer import cli, tpu_runtime
from tpujob_trainer import constants as c
from tpujob_trainer.config import ConfigError
from tpujob_trainer.tpu_runtime import TpuUnavailable, check_tpu_runtime


def never_probed(timeout: float) -> str | None:
    raise AssertionError("TensorFlow must not be started for this check")


def check(
    env: dict[str, str],
    *,
    installed: bool = True,
    chips: int = 0,
    probe: Callable[[float], str | None] = never_probed,
) -> None:
    check_tpu_runtime("auto", env, installed=lambda: installed, chips=lambda: chips, probe=probe, timeout=5)


def test_the_cpu_image_is_never_checked() -> None:
    check({}, installed=False)


def test_tpu_load_library_0_skips_the_check() -> None:
    check({"TPU_LOAD_LIBRARY": "0"})


def test_the_tpu_image_without_chips_fails_as_bad_settings_without_starting_tensorflow() -> None:
    started = time.monotonic()
    with pytest.raises(TpuUnavailable) as raised:
        check({"TPU_WORKER_ID": "0"})
    assert time.monotonic() - started < 1
    assert isinstance(raised.value, ConfigError)  # cli turns ConfigError into exit 2
    message = str(raised.value)
    assert "\n" not in message
    assert "no TPU chips" in message and "TPU_LOAD_LIBRARY=0" in message


def test_the_tpu_strategy_requested_without_chips_names_the_flag() -> None:
    with pytest.raises(TpuUnavailable, match=r"^--strategy tpu: "):
        check_tpu_runtime("tpu", {}, installed=lambda: True, chips=lambda: 0, probe=never_probed)


def test_chips_with_a_libtpu_that_hangs_fail_after_the_time_limit() -> None:
    with pytest.raises(
        TpuUnavailable, match=r"did not finish loading libtpu for the 4 TPU chip\(s\) within 5s"
    ):
        check({}, chips=4, probe=lambda timeout: None)


def test_chips_with_a_libtpu_that_fails_say_why() -> None:
    with pytest.raises(TpuUnavailable, match=r"could not load libtpu.*: failed \(RuntimeError: busy\)"):
        check({}, chips=4, probe=lambda timeout: "failed (RuntimeError: busy)")


def test_chips_with_a_working_libtpu_pass() -> None:
    check({}, chips=4, probe=lambda timeout: "ok")


def test_the_probe_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpu_runtime, "_PROBE", "import time; time.sleep(60)")
    started = time.monotonic()
    assert tpu_runtime.probe_tensorflow(timeout=1) is None
    assert time.monotonic() - started < 10


def test_the_probe_reports_a_failing_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpu_runtime, "_PROBE", "raise SystemExit('libtpu: no chips')")
    assert tpu_runtime.probe_tensorflow(timeout=30) == "failed (libtpu: no chips)"


def test_the_refusal_exits_2_with_one_line_in_the_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    env = {c.ENV_TERMINATION_LOG: str(log)}
    with pytest.raises(TpuUnavailable) as raised:
        check(env)
    assert cli._bad_config(raised.value, env) == c.EXIT_CODE_BAD_CONFIG == 2
    written = log.read_text()
    assert written.startswith("ConfigError: --strategy auto: this is the TPU image")
    assert len(written.strip().splitlines()) == 1
