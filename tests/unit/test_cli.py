"""The `tpujob` CLI: validate, render, crd, catalog; and every example is valid."""

import json
from pathlib import Path

import pytest
import yaml

from tests.manifests import MALFORMED, base_job
from tpujob.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def write(tmp_path, name, document):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def test_examples_exist_and_validate(capsys):
    assert len(EXAMPLES) >= 4
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    assert f"{len(EXAMPLES)} file(s) valid" in capsys.readouterr().out


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_every_example_renders(example, capsys):
    assert main(["render", str(example), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan) == {"job", "firstPass", "creates"}
    assert any(r.get("kind") == "Pod" for r in plan["creates"])


def test_validate_prints_one_line_per_problem_with_file_and_field(tmp_path, capsys):
    bad = base_job()
    bad["spec"]["tpu"]["type"] = "v3"
    bad["spec"]["tpu"]["slices"] = 0
    good = write(tmp_path, "good.yaml", base_job())
    path = write(tmp_path, "bad.yaml", bad)
    assert main(["validate", str(good), str(path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"{path}: spec.tpu.slices: Input should be greater than or equal to 1 (got 0)",
        f"{path}: spec.tpu.type: 'v3' is not allowed; valid: v4, v5e, v5p, v6e, tpu7x",
    ]


@pytest.mark.parametrize(
    ("manifest", "field"), [(m[1], m[2]) for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_render_refuses_malformed_input_with_the_validate_messages(tmp_path, capsys, manifest, field):
    path = write(tmp_path, "job.yaml", manifest)
    assert main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: {field}: " in captured.err


def test_multi_document_files_label_each_document(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    bad = base_job()
    bad["spec"]["tpu"]["slices"] = 0
    path.write_text(yaml.safe_dump(base_job()) + "---\n" + yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path} (document 2): spec.tpu.slices:")


def test_unreadable_and_unparsable_files(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed")
    assert main(["validate", str(tmp_path / "missing.yaml"), str(broken)]) == 1
    err = capsys.readouterr().err
    assert "missing.yaml: cannot read" in err
    assert "broken.yaml: not valid YAML" in err


def test_crd_and_catalog_commands(capsys):
    assert main(["crd"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["metadata"]["name"] == "tpujobs.tpujob.dev"
    assert main(["catalog"]) == 0
    table = capsys.readouterr().out
    assert "v5p    tpu-v5p-slice         2x2x4     16     4      ct5p-hightpu-4t" in table


def test_sandbox_without_the_test_bed_installed_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The plain `pip install tpujob` has no test bed: `tpujob sandbox` names the distribution to add."""
    from tpujob import cli

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert main(["sandbox", "up", "--dir", str(tmp_path)]) == 2
    assert "pip install ./sandbox" in capsys.readouterr().err
    assert not (tmp_path / "sandbox.json").exists()


def test_the_test_bed_registers_its_command() -> None:
    from importlib.metadata import entry_points

    from tpujob.cli import PLUGIN_GROUP

    (entry,) = [e for e in entry_points(group=PLUGIN_GROUP) if e.name == "sandbox"]
    assert entry.value == "tpujob_sandbox.cli:add_subcommand"


def test_validate_reads_every_yaml_file_under_a_directory(tmp_path, capsys):
    write(tmp_path, "a.yaml", base_job("a"))
    (tmp_path / "nested").mkdir()
    write(tmp_path / "nested", "b.yml", base_job("b"))
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert main(["validate", str(tmp_path)]) == 0
    assert "2 file(s) valid" in capsys.readouterr().out
    bad = base_job("c")
    bad["spec"]["tpu"]["slices"] = 0
    path = write(tmp_path / "nested", "c.yaml", bad)
    assert main(["validate", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}: spec.tpu.slices:")


def test_validate_the_examples_directory_as_the_readme_says(capsys):
    everything = sorted((ROOT / "examples").rglob("*.yaml"))
    assert main(["validate", str(ROOT / "examples")]) == 0
    assert f"{len(everything)} file(s) valid" in capsys.readouterr().out


def test_validate_an_empty_directory_says_so(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 1
    assert f"{tmp_path}: no *.yaml or *.yml file in the directory" in capsys.readouterr().err


def test_render_takes_a_multi_document_file_as_validate_does(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(base_job("first")) + "---\n" + yaml.safe_dump(base_job("second")))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    assert main(["render", str(path)]) == 0
    plans = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [p["job"] for p in plans] == ["default/first", "default/second"]
    assert main(["render", str(path), "-o", "json"]) == 0
    assert [p["job"] for p in json.loads(capsys.readouterr().out)] == ["default/first", "default/second"]


def test_render_of_a_multi_document_file_names_the_bad_document(tmp_path, capsys):
    bad = base_job("second")
    bad["spec"]["tpu"]["slices"] = 0
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(base_job("first")) + "---\n" + yaml.safe_dump(bad))
    assert main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{path} (document 2): spec.tpu.slices:")


def test_render_checks_the_zone_it_renders_into_like_the_operator(tmp_path, capsys):
    path = write(tmp_path, "v6e.yaml", base_job(tpu={"type": "v6e", "topology": "2x2"}))
    assert main(["render", str(path), "--zone", "us-central2-b", "--location", "us-central2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        f"{path}: spec.nodePool.zone: not set, so the pools go to us-central2-b, the zone given to "
        "tpujob render --zone, which does not offer v6e TPUs" in captured.err
    )
    assert main(["render", str(path), "--zone", "asia-northeast1-b", "--location", "asia-northeast1"]) == 0
    (pool, *_) = [o for o in yaml.safe_load(capsys.readouterr().out)["creates"] if o.get("gke")]
    assert pool["nodePool"]["locations"] == ["asia-northeast1-b"]


def test_namespace_applies_the_jobs_into_a_namespace_and_its_policy_judges_them(tmp_path, capsys):
    """`--namespace` is `kubectl apply -n`: a job naming no namespace is judged by that namespace's policy;
    one naming another namespace is refused, as kubectl refuses the apply."""
    privileged = base_job(trainer={"image": "img:1", "securityContext": {"privileged": True}})
    del privileged["metadata"]["namespace"]
    path = write(tmp_path, "job.yaml", privileged)
    policy = write(tmp_path, "policy.yaml", {"namespaces": {"team-a": {"privileged": True}}})
    assert main(["validate", str(path), "--policy", str(policy), "--namespace", "team-a"]) == 0
    assert main(["validate", str(path), "--policy", str(policy), "--namespace", "team-b"]) == 1
    assert "spec.trainer.securityContext.privileged: privileged containers are not allowed" in (
        capsys.readouterr().err
    )
    elsewhere = write(tmp_path, "elsewhere.yaml", base_job())  # metadata.namespace: default
    assert main(["validate", str(elsewhere), "--namespace", "team-a"]) == 1
    assert "metadata.namespace: default, but --namespace is team-a" in capsys.readouterr().err


def test_a_policy_file_the_operator_would_refuse_is_refused_naming_the_file_and_the_field(tmp_path):
    path = write(tmp_path, "job.yaml", base_job())
    policy = write(tmp_path, "policy.yaml", {"defaults": {"maxChips": -1}})
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(path), "--policy", str(policy)])
    assert str(exited.value).startswith(f"{policy} (--policy): defaults.maxChips:")
