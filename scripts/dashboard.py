"""The chart's Grafana dashboard (dashboards/tpujob.json), built with grafana-foundation-sdk's builders.

scripts/generate_chart.py writes it; tests/chart checks it: every metric a query reads is exported by the
operator or the trainer, every query parses under promtool and returns data from a Prometheus scraping
the test bed. The SDK does not validate what it builds (tests/chart/test_chart.py does).

Layout: each row is a list of panels, three to a line (width 8) when their number is a multiple of three,
else two (width 12), a lone panel the whole width; the SDK's Dashboard places them left to right under
their row (rows stay expanded, their panels at the top level as Grafana saves them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models

DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Trainer series carry the pod's namespace and TPUJob name (the PodMonitor's relabelings).
JOB = 'namespace=~"$namespace", tpujob=~"$job"'
RATE = "$__rate_interval"
HEIGHT = 8

# A panel builder of any kind (timeseries, stat, bargauge, text): the SDK gives them no common base.
PanelBuilder = Any


def _targets(targets: list[tuple[str, str]]) -> list[prometheus.Dataquery]:
    return [
        prometheus.Dataquery()
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        .expr(expr)
        .legend_format(legend)
        for i, (expr, legend) in enumerate(targets)
    ]


def _legend(
    mode: common.LegendDisplayMode, placement: common.LegendPlacement
) -> common_builders.VizLegendOptions:
    return common_builders.VizLegendOptions().show_legend(True).display_mode(mode).placement(placement)


def _tooltip() -> common_builders.VizTooltipOptions:
    """Grafana's own default (the SDK's sorts the series ascending)."""
    return (
        common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.SINGLE).sort(common.SortOrder.NONE)
    )


def _panel(
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    unit: str,
    kind: Callable[[], PanelBuilder] = timeseries.Panel,
) -> PanelBuilder:
    """A panel of Prometheus queries (expr, legend) on the dashboard's data source variable."""
    panel = kind().title(title).description(description).datasource(DATASOURCE).unit(unit).height(HEIGHT)
    panel.targets(_targets(targets)).overrides([])
    if kind is timeseries.Panel:
        panel.legend(_legend(common.LegendDisplayMode.LIST, common.LegendPlacement.BOTTOM)).tooltip(
            _tooltip()
        )
    return panel


def _quantiles(metric: str) -> list[tuple[str, str]]:
    return [
        (f"histogram_quantile({q}, sum by (le) (rate({metric}[{RATE}])))", f"p{int(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    ]


def operator_rows() -> list[tuple[str, list[PanelBuilder]]]:
    return [
        (
            "Jobs",
            [
                _panel(
                    "Jobs by phase",
                    "TPUJobs the operator knows, by phase (tpujob_jobs).",
                    [("sum by (phase) (tpujob_jobs)", "{{phase}}")],
                    "short",
                ).legend(
                    _legend(common.LegendDisplayMode.TABLE, common.LegendPlacement.RIGHT).calcs(
                        ["lastNotNull"]
                    )
                ),
                _panel(
                    "Phase transitions",
                    "Phase changes per second, by the phase entered.",
                    [(f"sum by (phase) (rate(tpujob_phase_transitions_total[{RATE}]))", "{{phase}}")],
                    "ops",
                ),
                _panel(
                    "Restarts by reason",
                    "Whole-job restarts per second. WorkerFailed spends maxRestarts; Preempted, NodeLost and "
                    "NodePoolLost do not.",
                    [(f"sum by (reason) (rate(tpujob_restarts_total[{RATE}]))", "{{reason}}")],
                    "ops",
                ),
                _panel(
                    "Time to recover",
                    "What a restart cost: from the fault the operator saw to the new attempt's first "
                    "training step (tpujob_recovery_seconds). Per job, each restart's fault, workers running "
                    "again, first step and steps redone: status.restartHistory.",
                    _quantiles("tpujob_recovery_seconds_bucket"),
                    "s",
                ),
                _panel(
                    "Longest wait by phase",
                    "How long the longest-waiting TPUJob has been Pending, Queued (for Kueue's admission), "
                    "Provisioning (a stockout shows here long before any histogram), Starting or Restarting, "
                    "from its status' times (an operator restart does not reset it); 0: none. Alert on "
                    "Provisioning.",
                    [
                        (
                            "(time() - min by (phase) (tpujob_phase_oldest_since_timestamp_seconds > 0)) "
                            "or min by (phase) (tpujob_phase_oldest_since_timestamp_seconds)",
                            "{{phase}}",
                        )
                    ],
                    "s",
                ),
                _panel(
                    "Kueue: time queued until admitted",
                    "How long TPUJobs labelled kueue.x-k8s.io/queue-name waited for Kueue to admit them "
                    "(tpujob_queued_seconds, per admission: the first, and again after an eviction). Jobs "
                    "waiting now: Queued in Jobs by phase; the longest wait: Longest wait by phase.",
                    _quantiles("tpujob_queued_seconds_bucket"),
                    "s",
                ),
                _panel(
                    "Workers that cannot start",
                    "TPUJobs whose workers could not start, per second, by the kubelet's reason "
                    "(ErrImagePull: an image that cannot be pulled; CreateContainerConfigError: a missing "
                    "Secret, ConfigMap or key), and jobs failed by spec.runPolicy.startupTimeoutSeconds "
                    "(StartupTimeout).",
                    [(f"sum by (reason) (rate(tpujob_worker_start_problems_total[{RATE}]))", "{{reason}}")],
                    "ops",
                ),
                _panel(
                    "Time to Running",
                    "From TPUJob start to every worker running (first time per job).",
                    _quantiles("tpujob_time_to_running_seconds_bucket"),
                    "s",
                ),
            ],
        ),
        (
            "GKE node pools",
            [
                _panel(
                    "Node pool provisioning time",
                    "From the create call to the node pool RUNNING.",
                    _quantiles("tpujob_node_pool_provisioning_seconds_bucket"),
                    "s",
                ),
                _panel(
                    "Node pool operations",
                    "GKE node pool calls per second, by operation and result.",
                    [
                        (
                            f"sum by (operation, result) (rate(tpujob_node_pool_operations_total[{RATE}]))",
                            "{{operation}} {{result}}",
                        )
                    ],
                    "ops",
                ),
                _panel(
                    "GKE errors by reason",
                    "GKE calls refused and pools gone to ERROR per second: Stockout (no TPU capacity), "
                    "QuotaExceeded, IncompatibleOperation (another operation runs), NodePoolRejected "
                    "(a request GKE refuses as sent), ReservationExhausted and ReservationNotFound (the "
                    "job's reservation is too small or missing), NodePoolLost (a pool in ERROR without a "
                    "capacity condition), GKEUnavailable (anything else).",
                    [(f"sum by (reason) (rate(tpujob_gke_errors_total[{RATE}]))", "{{reason}}")],
                    "ops",
                ),
            ],
        ),
        (
            "TPU capacity and cost",
            [
                _panel(
                    "TPU chips held",
                    "Chips held by TPUJobs right now (node pools alive, or pods running on existing pools).",
                    [
                        (
                            "sum by (tpu_type, capacity_mode) (tpujob_tpu_chips)",
                            "{{tpu_type}} {{capacity_mode}}",
                        )
                    ],
                    "short",
                ),
                _panel(
                    "TPU chip-hours in the time range",
                    "Chip-hours consumed in the dashboard's time range, by TPU type and capacity mode: the "
                    "cost basis (multiply by the price per chip-hour).",
                    [
                        (
                            "sum by (tpu_type, capacity_mode) "
                            "(increase(tpujob_tpu_chip_seconds_total[$__range])) / 3600",
                            "{{tpu_type}} {{capacity_mode}}",
                        )
                    ],
                    "short",
                    kind=bargauge.Panel,
                )
                .display_mode(common.BarGaugeDisplayMode.BASIC)
                .orientation(common.VizOrientation.HORIZONTAL)
                .show_unfilled(True)
                # Grafana's default; the SDK's is no calculation at all.
                .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])),
            ],
        ),
        (
            "Operator",
            [
                _panel(
                    "Reconcile duration",
                    "One reconcile pass of one TPUJob.",
                    _quantiles("tpujob_reconcile_duration_seconds_bucket"),
                    "s",
                ),
                _panel(
                    "Reconcile errors",
                    "Reconcile passes that raised an error, per second (kopf retries them).",
                    [(f"sum(rate(tpujob_reconcile_errors_total[{RATE}]))", "errors")],
                    "ops",
                ),
                _panel(
                    "API client-side limit wait",
                    "Time Kubernetes API requests waited for the operator's client-side limit "
                    "(TPUJOB_API_QPS / TPUJOB_API_BURST); sustained waits mean the limit paces the operator.",
                    _quantiles("tpujob_api_rate_limiter_wait_seconds_bucket"),
                    "s",
                ),
                _panel(
                    "Resync round",
                    "How long the last resync round took to give every TPUJob a pass; above the resync "
                    "interval (TPUJOB_RESYNC_SECONDS, 30 s), jobs are looked at less often than configured.",
                    [
                        ("max(tpujob_resync_round_seconds)", "seconds"),
                        ("max(tpujob_resync_round_jobs)", "jobs"),
                    ],
                    "s",
                ),
                _panel(
                    "Operator version",
                    "Running operator replicas by version.",
                    [("count by (version) (tpujob_build_info)", "{{version}}")],
                    "short",
                    kind=stat.Panel,
                )
                .text_mode(common.BigValueTextMode.NAME)
                .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])),
            ],
        ),
    ]


def job_row() -> tuple[str, list[PanelBuilder]]:
    series = "{{namespace}}/{{tpujob}}"
    return (
        "Per job: $job",
        [
            _panel(
                "Training throughput",
                "Examples fed per second, all workers of the job.",
                [
                    (
                        f"sum by (namespace, tpujob) (rate(tpujob_trainer_examples_total{{{JOB}}}[{RATE}]))",
                        series,
                    )
                ],
                "short",
            ),
            _panel(
                "Step time",
                "Wall time per step, input included (median and p90 over the job's workers).",
                [
                    (
                        f"histogram_quantile({q}, sum by (namespace, tpujob, le) "
                        f"(rate(tpujob_trainer_step_duration_seconds_bucket{{{JOB}}}[{RATE}])))",
                        f"{series} p{int(q * 100)}",
                    )
                    for q in (0.5, 0.9)
                ],
                "s",
            ),
            _panel(
                "Loss",
                "Training loss (mean since the last report), averaged over the job's workers.",
                [(f"avg by (namespace, tpujob) (tpujob_trainer_loss{{{JOB}}})", series)],
                "none",
            ),
            _panel(
                "Input wait",
                "Share of wall time the step loop waited for the input pipeline (1 = input-bound), "
                "worst worker.",
                [
                    (
                        f"max by (namespace, tpujob) "
                        f"(rate(tpujob_trainer_input_wait_seconds_total{{{JOB}}}[{RATE}]))",
                        series,
                    )
                ],
                "percentunit",
            ),
            _panel(
                "Progress",
                "Training step reached over the step at which training ends.",
                [
                    (
                        f"max by (namespace, tpujob) (tpujob_trainer_global_step{{{JOB}}}) / "
                        f"max by (namespace, tpujob) (tpujob_trainer_target_steps{{{JOB}}})",
                        series,
                    )
                ],
                "percentunit",
            ),
            _panel(
                "Last checkpoint age",
                "Seconds since the job last saved a checkpoint: a restart loses at most this much work.",
                [
                    (
                        f"time() - max by (namespace, tpujob) "
                        f"(tpujob_trainer_last_checkpoint_timestamp_seconds{{{JOB}}} > 0)",
                        series,
                    )
                ],
                "s",
            ),
        ],
    )


def tpu_row() -> tuple[str, list[PanelBuilder]]:
    """GKE's TPU device plugin's per-chip series (the chart's tpuDevicePlugin PodMonitor), by TPUJob: the
    PodMonitor labels the chips a job's worker holds with tpujob (others have none, hence tpujob!="")."""
    series = "{{namespace}}/{{tpujob}}"
    chips = f'{{{JOB}, tpujob!=""}}'
    return (
        "TPU utilization: $job",
        [
            _panel(
                "TPU duty cycle",
                "Percent of the time the job's TPU chips were busy (GKE's device plugin: duty_cycle, from "
                "the TPU runtime, over its 10 s collection), the mean over the job's chips and its least "
                "busy chip. Near zero while the job runs: the chips wait (input, a hung collective, a "
                "stalled program). Needs a TPU runtime that reports it (libtpu).",
                [
                    (f"avg by (namespace, tpujob) (duty_cycle{chips})", f"{series} mean"),
                    (f"min by (namespace, tpujob) (duty_cycle{chips})", f"{series} least busy chip"),
                ],
                "percent",
            ),
            _panel(
                "TensorCore utilization",
                "How much of the TensorCores' capacity the job uses, the mean over its chips (GKE's "
                "device plugin: tensorcore_utilization, a host metric). Low with a high duty cycle: busy "
                "chips doing little (small batches, memory-bound steps).",
                [(f"avg by (namespace, tpujob) (tensorcore_utilization{chips})", series)],
                "percent",
            ),
            _panel(
                "HBM used",
                "High-bandwidth memory the job's program holds on its chips, and what they have (GKE's "
                "device plugin: memory_used, memory_total).",
                [
                    (f"sum by (namespace, tpujob) (memory_used{chips})", f"{series} used"),
                    (f"sum by (namespace, tpujob) (memory_total{chips})", f"{series} total"),
                ],
                "bytes",
            ),
        ],
    )


def goodput_row() -> tuple[str, list[PanelBuilder]]:
    """Goodput accounting (status.goodput, operator/tpujob/status/goodput.py): productive job time over all
    accounted time, and where the rest went, in ml-goodput-measurement's categories."""
    productive = "sum(increase(tpujob_productive_seconds_total[$__range]))"
    badput = "sum(increase(tpujob_badput_seconds_total[$__range]))"
    return (
        "Goodput",
        [
            _panel(
                "Goodput in the time range",
                "Productive training time over all time the operator accounted for its jobs in the time "
                "range (waiting for TPUs, startup, checkpoints, input waits, progress lost to disruptions "
                "are the rest). Accounted at phase changes and when an attempt ends, so a running job's "
                "latest stretch shows once it changes phase.",
                [(f"{productive} / ({productive} + {badput})", "goodput")],
                "percentunit",
                kind=stat.Panel,
            ).reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])),
            _panel(
                "Badput by category in the time range",
                "Job time lost in the time range, by goodput category (tpuInitialization: waiting for and "
                "provisioning the slices; trainingPrep: pods starting; infrastructureRecovery: restarting; "
                "programStartup, dataLoading, checkpointSave, checkpointRestore, "
                "wastedProgressFromDisruption: steps redone after a preemption).",
                [
                    (
                        "sum by (category) (increase(tpujob_badput_seconds_total[$__range]))",
                        "{{category}}",
                    )
                ],
                "s",
                kind=bargauge.Panel,
            )
            .display_mode(common.BarGaugeDisplayMode.BASIC)
            .orientation(common.VizOrientation.HORIZONTAL)
            .show_unfilled(True)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])),
            _panel(
                "Finished jobs' goodput ratio",
                "The goodput ratio of the jobs that finished in the time range (median and p10 over them), "
                "by capacity mode.",
                [
                    (
                        f"histogram_quantile({q}, sum by (capacity_mode, le) "
                        "(increase(tpujob_goodput_ratio_bucket[$__range])))",
                        f"{{{{capacity_mode}}}} p{int(q * 100)}",
                    )
                    for q in (0.5, 0.1)
                ],
                "percentunit",
            ),
        ],
    )


def _variables() -> list[Any]:
    def query(name: str, label: str, selector: str) -> dashboard_builders.QueryVariable:
        definition = f"label_values({selector}, {label})"
        return (
            dashboard_builders.QueryVariable(name)
            .label(name.capitalize())
            .datasource(DATASOURCE)
            .query({"query": definition, "refId": name})
            .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .multi(True)
            .all_value(".*")
            .current(dashboard_models.VariableOption(selected=True, text=["All"], value=["$__all"]))
            .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
            .hide(dashboard_models.VariableHide.DONT_HIDE)
        )

    return [
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .hide(dashboard_models.VariableHide.DONT_HIDE),
        query("namespace", "namespace", "tpujob_trainer_global_step"),
        query("job", "tpujob", 'tpujob_trainer_global_step{namespace=~"$namespace"}'),
    ]


def builder() -> dashboard_builders.Dashboard:
    board = (
        dashboard_builders.Dashboard("TPUJob")
        .uid("tpujob-overview")
        .description("TPUJob operator and trainers: jobs, GKE node pools, TPU chip-hours, training.")
        .tags(["tpujob", "tpu", "gke"])
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("")
        .links([])
        .annotations([])
        .variables(_variables())
    )
    number = 0
    for title, panels in [*operator_rows(), job_row(), tpu_row(), goodput_row()]:
        number += 1
        # Expanded: its panels follow it on the dashboard (Row.with_panel would nest and collapse them).
        board.with_row(dashboard_builders.Row(title).collapsed(False).id(number))
        width = 24 if len(panels) == 1 else 8 if len(panels) % 3 == 0 else 12
        for panel in panels:
            number += 1
            board.with_panel(panel.id(number).span(width))
    return board


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    model: dict[str, Any] = json.loads(json.dumps(builder().build(), cls=JSONEncoder))
    # The SDK's variable model has no `definition` (the query text Grafana lists in the variables
    # settings and fills in when it saves a dashboard): the query's own text.
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            variable["definition"] = variable["query"]["query"]
    return model


def dashboard_json() -> str:
    """dashboards/tpujob.json: stable (sorted keys), indented by 2, ending in a newline."""
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"
