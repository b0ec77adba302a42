"""The README's sandbox recipe, run as written in a fresh folder (with the project's .venv and examples/):
the example job ends Succeeded. Each line runs through bash as a user would type it; only the watch line
(`kubectl get ... -w`) becomes a wait for the job's phase, and the backgrounded operator is stopped at the
end. The trainer checkpoints to gs://my-bucket/...: in the sandbox a bucket is a folder of the state dir."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.chart.tools import kubectl
from tpujob_sandbox import wait_for

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Try it without GKE: the sandbox"


def recipe(page: str = "README.md") -> list[str]:
    """The bash block under the sandbox heading of the README (or a docs page), one command a line, comments
    dropped."""
    text = (ROOT / page).read_text()
    block = re.search(re.escape(SECTION) + r".*?```bash\n(.*?)```", text, re.S)
    assert block, f"no bash block under {SECTION!r} in {page}"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_docs_quickstart_is_the_readme_recipe():
    """The docs' sandbox page carries the same recipe, so the test below proves both."""
    assert recipe("docs/getting-started/sandbox.md") == recipe()


@pytest.mark.slow
def test_the_readme_sandbox_recipe_runs_the_example_to_succeeded(tmp_path):
    for name in (".venv", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{kubectl().parent}:{os.environ['PATH']}"}
    env.pop("KUBECONFIG", None)
    background: list[subprocess.Popen[bytes]] = []
    commands = recipe()
    job = None
    try:
        for command in commands:
            if command.startswith("export "):
                name, _, value = command.removeprefix("export ").partition("=")
                env[name] = value.replace("$PWD", str(tmp_path))
            elif command.endswith("&"):
                log = (tmp_path / "background.log").open("wb")
                background.append(
                    subprocess.Popen(
                        ["bash", "-c", command.rstrip("&").strip()],
                        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                )  # fmt: skip
            elif " -w" in command and "get" in command:
                assert job, "the recipe applies a job before it watches"
                wait_succeeded(job, env, tmp_path)
            else:
                if "sandbox down" in command:
                    stop(background)
                done = run(command, env, tmp_path)
                assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
                if "apply -f examples/" in command:
                    job = re.search(r"tpujob.tpujob.dev/(\S+)", done.stdout).group(1)
        assert job and any("sandbox down" in c for c in commands)
        checkpoints = list((tmp_path / ".state" / "sandbox" / "gcs" / "my-bucket").rglob("checkpoint*"))
        assert checkpoints, "the trainer checkpointed to gs://my-bucket (a folder of the sandbox)"
    finally:
        stop(background)
        run(".venv/bin/tpujob sandbox down --dir .state/sandbox", env, tmp_path)


def run(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def wait_succeeded(job: str, env: dict[str, str], cwd: Path) -> None:
    wait_for(
        lambda: phase(job, env, cwd) == "Succeeded",
        timeout=300,
        what=f"TPUJob {job} to be Succeeded",
        last_state=lambda: phase(job, env, cwd),
    )


def phase(job: str, env: dict[str, str], cwd: Path) -> str:
    got = subprocess.run(
        ["kubectl", "get", "tpujob", job, "-o", "jsonpath={.status.phase}"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if got.stdout.strip() == "Failed":
        pytest.fail(run(f"kubectl get tpujob {job} -o yaml", env, cwd).stdout)
    return got.stdout.strip()


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    processes.clear()
