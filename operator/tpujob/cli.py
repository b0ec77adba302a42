"""The `tpujob` command line."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

from tpujob import __version__, tpu
from tpujob.api import DefaultZones
from tpujob.api.crd import crd_yaml
from tpujob.api.status import Reason
from tpujob.api.tenancy import TenancyPolicy, parse_policy
from tpujob.api.validation import DEFAULT_MAX_HOSTS_PER_JOB
from tpujob.localrun import add_subcommand as add_run
from tpujob.manifests import manifest_files, read_documents
from tpujob.render import Cluster
from tpujob.render.creates import creates
from tpujob.render.workload import MIN_POD_SETS, KueueApi
from tpujob.status.verdict import Rules, Verdict, judge, refused

PLUGIN_GROUP = "tpujob.commands"


def rules_of(args: argparse.Namespace, zones: DefaultZones | None) -> Rules:
    """The operator's settings to judge by, from the flags (each named as the setting it stands for)."""
    policy = TenancyPolicy()
    if args.policy is not None:
        try:
            policy = parse_policy(args.policy.read_text(), f"{args.policy} (--policy)")
        except OSError as error:
            raise SystemExit(f"{args.policy}: cannot read: {error.strerror}") from None
        except ValueError as error:
            raise SystemExit(str(error)) from None
    return Rules(
        tenancy=policy,
        max_hosts_per_job=args.max_hosts_per_job,
        kueue=args.kueue,
        default_zones=zones,
        kueue_api=KueueApi(max_pod_sets=args.kueue_pod_sets),
    )


def in_namespace(document: Any, namespace: str | None) -> tuple[Any, str]:
    """The document as applied into `namespace` (kubectl apply -n), or a problem when it names another one."""
    if namespace is None or not isinstance(document, dict):
        return document, ""
    found = document.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    named = metadata.get("namespace")
    if named and named != namespace:
        return document, (
            f"metadata.namespace: {named}, but --namespace is {namespace} (kubectl refuses such an apply); "
            "remove one of them"
        )
    return {**document, "metadata": {**metadata, "namespace": namespace}}, ""


# A document's label, the verdict on it (None: not judged), and its problem lines.
Judged = tuple[str, Verdict | None, list[str]]


def judged(paths: list[Path], args: argparse.Namespace, rules: Rules, cluster: Cluster) -> Iterator[Judged]:
    """(label, verdict, problem lines) for every document of every file, judged as the operator's first
    pass would judge it (tpujob.status.verdict); a file that cannot be read is one line, with no verdict."""
    now = dt.datetime.now(dt.UTC)
    for path in paths:
        documents, unreadable = read_documents(path)
        if unreadable:
            yield str(path), None, [unreadable]
        for label, document in documents:
            document, wrong_namespace = in_namespace(document, args.namespace)
            if wrong_namespace:
                yield label, None, [f"{label}: {wrong_namespace}"]
                continue
            verdict = judge(document, rules, cluster, now)
            lines = [f"{label}: {problem}" for problem in verdict.problems]
            if verdict.problems and not refused(verdict) and verdict.job is not None:
                held = f"the operator would hold it: {verdict.status.reason}"
                if verdict.status.reason == Reason.KUEUE_NOT_ENABLED:
                    held += "; --kueue judges as an operator that runs with Kueue"
                lines = [f"{line} ({held})" for line in lines]
            yield label, verdict, lines


def cmd_validate(args: argparse.Namespace) -> int:
    files = manifest_files(args.files)
    cluster = Cluster(zone=args.zone) if args.zone else Cluster()
    zones = DefaultZones(cluster.zones, "the zone given to tpujob validate --zone") if args.zone else None
    problems = [line for _, _, lines in judged(files, args, rules_of(args, zones), cluster) for line in lines]
    problems += [
        f"{path}: no *.yaml or *.yml file in the directory"
        for path in args.files
        if path.is_dir() and not manifest_files([path])
    ]
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        print(f"{len(files)} file(s) valid")
    return 1 if problems else 0


def cmd_render(args: argparse.Namespace) -> int:
    """Per TPUJob of the file, what the operator creates for it in order (a YAML document each; in JSON one
    object, or a list of them), after its first pass' verdict: a job it would not run is not rendered."""
    cluster = Cluster(project=args.project, location=args.location, cluster=args.cluster, zone=args.zone)
    # A job that names no zone renders into --zone: checked as the operator checks its own zone.
    zones = DefaultZones(cluster.zones, "the zone given to tpujob render --zone")
    results = list(judged([args.file], args, rules_of(args, zones), cluster))
    problems = [line for _, _, lines in results for line in lines]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    plans = [rendered(verdict, cluster) for _, verdict, _ in results if verdict is not None]
    if args.output == "json":
        print(json.dumps(plans[0] if len(plans) == 1 else plans, indent=2))
    else:
        print(yaml.safe_dump_all(plans, sort_keys=False), end="")
    return 0


def rendered(verdict: Verdict, cluster: Cluster) -> dict[str, Any]:
    """One job's plan: what its first pass decides, then every object the operator creates for it."""
    job = verdict.job
    assert job is not None
    wire = verdict.status.to_wire()
    return {
        "job": f"{job.metadata.namespace}/{job.metadata.name}",
        "firstPass": {key: wire.get(key) for key in ("phase", "reason", "message")},
        "creates": creates(job, cluster, queued=verdict.decision.workload.create),
    }


def add_rules_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's settings a job is judged by, as `tpujob operator` takes them from TPUJOB_* variables."""
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="the tenancy policy, YAML, as the operator's TPUJOB_TENANCY_POLICY (the chart's tenancy value); "
        "default: the operator's default policy",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="the namespace the jobs are applied into (kubectl apply -n); default: each job's own",
    )
    parser.add_argument(
        "--max-hosts-per-job",
        type=int,
        default=DEFAULT_MAX_HOSTS_PER_JOB,
        metavar="N",
        help="the operator's TPUJOB_MAX_HOSTS_PER_JOB (chart value operator.maxHostsPerJob)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="the operator runs with Kueue (TPUJOB_KUEUE, the chart's kueue.enabled): a job labelled "
        "kueue.x-k8s.io/queue-name gets a Workload; without it, such a job waits as KueueNotEnabled",
    )
    parser.add_argument(
        "--kueue-pod-sets",
        type=int,
        default=MIN_POD_SETS,
        metavar="N",
        help="pod sets a Workload may hold in your Kueue (its Workload CRD's spec.podSets maxItems, which "
        f"the operator reads): 8 up to v0.17, 10 in v0.18, 18 from v0.19; default {MIN_POD_SETS}, the fewest",
    )


def cmd_crd(args: argparse.Namespace) -> int:
    print(crd_yaml(cel=not args.no_cel), end="")
    return 0


def catalog_table() -> str:
    header = ("TYPE", "ACCELERATOR LABEL", "TOPOLOGY", "CHIPS", "HOSTS", "MACHINE TYPE")
    rows = [header, *[tuple(str(v) for v in row) for row in tpu.catalog_rows()]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    notes = [
        "",
        "3D generations (v4, v5p, tpu7x) also take larger AxBxC shapes with every dimension a multiple of 4,",
        "up to "
        + ", ".join(f"{g.type}: {g.max_chips}" for g in tpu.GENERATIONS.values() if g.dimensions == 3)
        + " chips. Multislice (slices > 1) needs multi-host slices.",
    ]
    return "\n".join(lines + notes)


def cmd_catalog(args: argparse.Namespace) -> int:
    print(catalog_table())
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    """Run the operator in the foreground (kopf), configured by TPUJOB_* environment variables."""
    from tpujob import logs, memreport
    from tpujob.config import from_environment
    from tpujob.peering import ensure_identity

    memreport.install_from_environment()
    config = from_environment()
    ensure_identity()
    import kopf

    import tpujob.handlers  # noqa: F401  (registers the handlers)

    kopf.configure(verbose=args.verbose)
    logs.configure(args.verbose, config.log_format)
    # No standalone=, peering_name= or priority=: kopf's startup handlers run after kopf.run has copied those
    # into its settings and before kopf reads them, so the peering mode is set there, in one place
    # (handlers/startup.py, set_peering).
    kopf.run(
        clusterwide=config.namespace is None,
        namespaces=[config.namespace] if config.namespace else [],
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpujob", description="TPU training jobs on GKE.")
    parser.add_argument("--version", action="version", version=f"tpujob {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check TPUJob manifests (files, or directories' *.yaml and *.yml); one line per problem",
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE_OR_DIR")
    validate.add_argument(
        "--zone",
        help="the operator's zone(s) (TPUJOB_GKE_ZONE), comma-separated: a job that names no zone must have "
        "its TPU type offered there; default: not checked",
    )
    add_rules_arguments(validate)
    validate.set_defaults(func=cmd_validate)

    render = commands.add_parser(
        "render",
        help="print what the operator creates for each TPUJob of a file, in order (Workload, node pools, "
        "NetworkPolicy, host lists, Service, pods), after judging it as the operator does",
    )
    render.add_argument("file", type=Path, metavar="FILE")
    render.add_argument("--output", "-o", choices=("json", "yaml"), default="yaml")
    defaults = Cluster()
    render.add_argument("--project", default=defaults.project, help="GKE project")
    render.add_argument("--location", default=defaults.location, help="GKE cluster location")
    render.add_argument("--cluster", default=defaults.cluster, help="GKE cluster name")
    render.add_argument(
        "--zone",
        default=defaults.zone,
        help="zone(s) of the TPU node pools of a job that names none, comma-separated; one must offer the "
        "job's TPU type",
    )
    add_rules_arguments(render)
    render.set_defaults(func=cmd_render)

    crd = commands.add_parser("crd", help="print the TPUJob CustomResourceDefinition")
    crd.add_argument(
        "--no-cel",
        action="store_true",
        help="leave out the CEL rules (x-kubernetes-validations) for API servers before 1.25",
    )
    crd.set_defaults(func=cmd_crd)

    catalog = commands.add_parser("catalog", help="TPU generations, topologies, hosts and machine types")
    catalog.set_defaults(func=cmd_catalog)

    run_operator = commands.add_parser(
        "operator", help="run the operator (settings: TPUJOB_* variables, docs/reference/settings.md)"
    )
    run_operator.add_argument("--verbose", action="store_true", help="log every kopf step")
    run_operator.set_defaults(func=cmd_operator)

    add_run(commands)
    add_plugin_commands(commands)
    return parser


def add_plugin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Subcommands other distributions register under the `tpujob.commands` entry point group: the
    test bed's `tpujob sandbox` when tpujob-sandbox is installed. Without it, `sandbox` says how to get it."""
    plugins = {entry.name: entry for entry in entry_points(group=PLUGIN_GROUP)}
    for entry in plugins.values():
        entry.load()(commands)
    if "sandbox" not in plugins:
        sandbox = commands.add_parser("sandbox", help="the test bed (not installed)", add_help=False)
        sandbox.add_argument("rest", nargs=argparse.REMAINDER)
        sandbox.set_defaults(func=cmd_sandbox_missing)


def cmd_sandbox_missing(args: argparse.Namespace) -> int:
    print(
        "tpujob sandbox is the test bed, a separate distribution: from a clone of the repository, "
        "`make venv` installs it, or `pip install ./sandbox`",
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
