"""The `tpujob` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

import yaml

from tpujob import __version__, tpu
from tpujob.api import DefaultZones
from tpujob.api.crd import crd_yaml
from tpujob.api.validation import DEFAULT_MAX_HOSTS_PER_JOB, size_problems
from tpujob.localrun import add_subcommand as add_run
from tpujob.manifests import load_jobs, manifest_files, problems_in
from tpujob.render import Cluster, render_plan

PLUGIN_GROUP = "tpujob.commands"


def cmd_validate(args: argparse.Namespace) -> int:
    files = manifest_files(args.files)
    problems = [line for path in files for line in problems_in(path)]
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
    """One plan per TPUJob in the file: a YAML document each, or in JSON the plan (one job) or a list."""
    cluster = Cluster(project=args.project, location=args.location, cluster=args.cluster, zone=args.zone)
    # A job that names no zone renders into --zone: checked as the operator checks its own zone.
    jobs = load_jobs(args.file, DefaultZones(cluster.zones, "the zone given to tpujob render --zone"))
    # What the operator would refuse with its default cap on hosts is not rendered either.
    too_large = [f"{args.file}: {p}" for job in jobs for p in size_problems(job, DEFAULT_MAX_HOSTS_PER_JOB)]
    if too_large:
        print("\n".join(too_large), file=sys.stderr)
        return 1
    plans = [render_plan(job, cluster).to_dict() for job in jobs]
    if args.output == "json":
        print(json.dumps(plans[0] if len(plans) == 1 else plans, indent=2))
    else:
        print(yaml.safe_dump_all(plans, sort_keys=False), end="")
    return 0


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
    validate.set_defaults(func=cmd_validate)

    render = commands.add_parser(
        "render", help="print the node pools and manifests each TPUJob of a file becomes"
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
