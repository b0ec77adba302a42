import io

import pytest

from tpujob_trainer.progress import Progress, progress_mode, render_bar


@pytest.mark.parametrize(
    ("requested", "is_chief", "is_terminal", "mode"),
    [
        ("auto", True, True, "bar"),
        ("auto", True, False, "log"),
        ("auto", False, True, "off"),
        ("bar", True, False, "bar"),  # a local run draws worker 0's bar through a pipe
        ("off", True, True, "off"),
        ("log", False, False, "off"),
    ],
)
def test_progress_mode(requested: str, is_chief: bool, is_terminal: bool, mode: str) -> None:
    assert progress_mode(requested, is_chief, is_terminal) == mode


def test_render_bar() -> None:
    assert render_bar(0, 10, loss=2.0, examples_per_second=0, width=10) == (
        "[>.........] 0/10 loss 2.0000 0 examples/s"
    )
    assert render_bar(5, 10, loss=0.5, examples_per_second=1234.4, width=10) == (
        "[=====>....] 5/10 loss 0.5000 1,234 examples/s"
    )
    assert render_bar(10, 10, loss=0.1, examples_per_second=1, width=10).startswith("[==========] 10/10")


def test_the_bar_redraws_one_line() -> None:
    stream = io.StringIO()
    progress = Progress("bar", is_chief=True, stream=stream)
    progress.update(1, 2, loss=1.0, examples_per_second=10)
    progress.update(2, 2, loss=0.5, examples_per_second=10)
    progress.close()
    assert stream.getvalue().count("\r") == 2
    assert stream.getvalue().endswith("2/2 loss 0.5000 10 examples/s\n")
