{{/* Names and labels shared by every template. */}}

{{- define "tpujob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpujob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tpujob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpujob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tpujob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tpujob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tpujob
{{- end }}

{{- define "tpujob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpujob.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: give the existing ServiceAccount's name when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Fail with a clear message when a Prometheus Operator kind is wanted but its API is missing.
`helm lint` (neither install nor upgrade) checks the chart, not a cluster: it renders the kind. */}}
{{- define "tpujob.requirePrometheusOperator" -}}
{{- $kind := index . 0 }}{{- $value := index . 1 }}{{- $ctx := index . 2 }}
{{- $deploying := or $ctx.Release.IsInstall $ctx.Release.IsUpgrade }}
{{- if and $deploying (not ($ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind))) }}
{{- fail (printf "%s=true needs the Prometheus Operator API monitoring.coreos.com/v1 (kind %s), which this cluster does not serve: install the Prometheus Operator (e.g. kube-prometheus-stack) first, use GKE's Managed Service for Prometheus instead (monitoring.backend=gmp), or set %s=false. With `helm template`, pass --api-versions monitoring.coreos.com/v1/%s." $value $kind $value $kind) }}
{{- end }}
{{- end }}

{{/* The same for Google Cloud Managed Service for Prometheus (monitoring.backend=gmp): its API
monitoring.googleapis.com/v1, served where managed collection is on (GKE turns it on for new clusters) or
where its operator is installed. */}}
{{- define "tpujob.requireGMP" -}}
{{- $kind := index . 0 }}{{- $value := index . 1 }}{{- $ctx := index . 2 }}
{{- $deploying := or $ctx.Release.IsInstall $ctx.Release.IsUpgrade }}
{{- if and $deploying (not ($ctx.Capabilities.APIVersions.Has (printf "monitoring.googleapis.com/v1/%s" $kind))) }}
{{- fail (printf "%s=true with monitoring.backend=gmp needs Managed Service for Prometheus' API monitoring.googleapis.com/v1 (kind %s), which this cluster does not serve: turn on managed collection (gcloud container clusters update CLUSTER --enable-managed-prometheus), or set monitoring.backend to prometheus-operator or none. With `helm template`, pass --api-versions monitoring.googleapis.com/v1/%s." $value $kind $kind) }}
{{- end }}
{{- end }}

{{/* The groups of files/alerts.yaml (a plain Prometheus rule file: promtool tests it as is), less the
alerts named in alerts.disabled, as YAML: the PrometheusRule's and the GMP ClusterRules' spec.groups.
Files.Get runs no Helm template: the alerts' own stay as written. */}}
{{- define "tpujob.alertGroups" -}}
{{- $groups := list }}
{{- range (.Files.Get "files/alerts.yaml" | fromYaml).groups }}
{{- $rules := list }}
{{- range .rules }}
{{- if not (has .alert $.Values.alerts.disabled) }}
{{- $rules = append $rules . }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- $groups = append $groups (set . "rules" $rules) }}
{{- end }}
{{- end }}
{{- toYaml $groups }}
{{- end }}

{{/* Who may read the trainers' metrics port, as TPUJOB_NETWORK_POLICY_METRICS_FROM (JSON): this release's
operator pods (it reads worker 0's step counter there) and networkPolicy.metricsFrom (Prometheus). */}}
{{- define "tpujob.jobMetricsFrom" -}}
{{- $operator := dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace)) "podSelector" (dict "matchLabels" (include "tpujob.selectorLabels" . | fromYaml)) }}
{{- prepend (.Values.networkPolicy.metricsFrom | default list) $operator | toJson }}
{{- end }}
