{{/*
The chart's name, or nameOverride.
*/}}
{{- define "modelgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified app name: fullnameOverride, else "<release>-<name>" (just the release name when it
already contains the chart's name). Trimmed to 63 characters: Kubernetes names and label values are
DNS labels.
*/}}
{{- define "modelgate.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "modelgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object the chart renders.
*/}}
{{- define "modelgate.labels" -}}
helm.sh/chart: {{ include "modelgate.chart" . }}
{{ include "modelgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: router
{{- end }}

{{/*
Labels that select the router's pods (Deployment selector, Service, PDB, NetworkPolicy, spread
constraints). Never change them in an upgrade: a Deployment's selector is immutable.
*/}}
{{- define "modelgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modelgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the router runs as.
*/}}
{{- define "modelgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "modelgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "modelgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The namespaces the router watches, one per line: watch.namespaces, or the release namespace. Empty
when it watches every namespace.
*/}}
{{- define "modelgate.watchedNamespaces" -}}
{{- if not .Values.watch.allNamespaces }}
{{- range (.Values.watch.namespaces | default (list .Release.Namespace)) }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Secret holding keys.yaml: auth.existingSecret, or the one the chart renders.
*/}}
{{- define "modelgate.keysSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-keys" (include "modelgate.fullname" .)) }}
{{- end }}

{{/*
Checks of values that the schema cannot express; each fails the render with a message saying what
to set.
*/}}
{{- define "modelgate.validate" -}}
{{- if and (not .Values.auth.existingSecret) (not .Values.auth.keys) }}
{{- fail "auth: set auth.keys (a list of {name, key} or {name, keySha256}) or auth.existingSecret (a Secret with a keys.yaml key): modelgate answers 401 to every request without API keys" }}
{{- end }}
{{- if and .Values.auth.existingSecret .Values.auth.keys }}
{{- fail "auth: set either auth.keys or auth.existingSecret, not both (the keys would be ignored)" }}
{{- end }}
{{- $names := dict }}
{{- range .Values.auth.keys }}
{{- if hasKey $names .name }}
{{- fail (printf "auth.keys: the name %q is used twice; every key needs its own name" .name) }}
{{- end }}
{{- $_ := set $names .name true }}
{{- end }}
{{- include "modelgate.validateScorers" (dict "where" "config.routing.scorers" "routing" .Values.config.routing) }}
{{- range .Values.modelPools }}
{{- include "modelgate.validateScorers" (dict "where" (printf "modelPools %q: spec.routing.scorers" .name) "routing" .spec.routing) }}
{{- end }}
{{- range .Values.modelDeployments }}
{{- if has .name (.spec.fallbacks | default list) }}
{{- fail (printf "modelDeployments %q: spec.fallbacks names the deployment itself; list other ModelDeployments of its namespace" .name) }}
{{- end }}
{{- end }}
{{- if and .Values.watch.allNamespaces .Values.watch.namespaces }}
{{- fail "watch: set watch.allNamespaces or watch.namespaces, not both" }}
{{- end }}
{{- if not .Values.watch.allNamespaces }}
{{- $watched := include "modelgate.watchedNamespaces" . | trim | splitList "\n" }}
{{- range $kind, $objects := dict "modelPools" .Values.modelPools "modelDeployments" .Values.modelDeployments }}
{{- range $objects }}
{{- $namespace := .namespace | default $.Release.Namespace }}
{{- if not (has $namespace $watched) }}
{{- fail (printf "%s: %q is in namespace %s, which the router does not watch; add it to watch.namespaces (watched: %s)" $kind .name $namespace (join ", " $watched)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails when a routing block's scorers list names a scorer twice (the router and the ModelPool CRD refuse
it; the schema cannot say it). Takes a dict: where (for the message) and routing (the block, or nil).
*/}}
{{- define "modelgate.validateScorers" -}}
{{- $seen := dict }}
{{- range (.routing | default dict).scorers }}
{{- if hasKey $seen .name }}
{{- fail (printf "%s: the scorer %q is listed twice; list each scorer once with its weight" $.where .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- end }}

{{/*
The router's config file (modelgate.yaml) in Kubernetes mode. server.host/port and admin.port come
from `service`, server.shutdownDelayMs/gracePeriodMs from `drain`, everything else from `config`
(resilience and routing only when set, so an empty block keeps the router's defaults).
*/}}
{{- define "modelgate.config" -}}
{{- $c := .Values.config }}
{{- $server := dict "host" "0.0.0.0" "port" .Values.service.port "shutdownDelayMs" (mul .Values.drain.shutdownDelaySeconds 1000) "gracePeriodMs" (mul .Values.drain.gracePeriodSeconds 1000) }}
{{- $server = merge $server (deepCopy $c.server) }}
{{- $namespaces := list }}
{{- range (include "modelgate.watchedNamespaces" . | splitList "\n") }}
{{- if . }}{{ $namespaces = append $namespaces . }}{{ end }}
{{- end }}
{{- $leader := dict "enabled" $c.leaderElection.enabled "leaseName" ($c.leaderElection.leaseName | default (include "modelgate.fullname" .)) "leaseDurationMs" $c.leaderElection.leaseDurationMs "renewIntervalMs" $c.leaderElection.renewIntervalMs }}
{{- $discovery := dict "mode" "kubernetes" "namespaces" $namespaces "resyncIntervalMs" $c.discovery.resyncIntervalMs "restartBackoffMs" $c.discovery.restartBackoffMs "leaderElection" $leader }}
{{- $config := dict "server" $server "admin" (dict "host" "0.0.0.0" "port" .Values.service.adminPort) "log" (dict "level" $c.logLevel) "auth" (dict "keysFile" "/etc/modelgate/keys/keys.yaml" "reloadIntervalMs" .Values.auth.reloadIntervalMs) "discovery" $discovery }}
{{- with $c.resilience }}
{{- $_ := set $config "resilience" . }}
{{- end }}
{{- with $c.routing }}
{{- $_ := set $config "routing" . }}
{{- end }}
{{- with $c.priority }}
{{- $_ := set $config "priority" . }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the preStop sleep, the router's shutdown delay and grace period, and
5 s to spare, so Kubernetes never kills a pod that is still draining.
*/}}
{{- define "modelgate.terminationGracePeriodSeconds" -}}
{{- add .Values.drain.preStopSeconds .Values.drain.shutdownDelaySeconds .Values.drain.gracePeriodSeconds 5 }}
{{- end }}

{{/*
The subjects of every RoleBinding and ClusterRoleBinding: the router's ServiceAccount.
*/}}
{{- define "modelgate.rbacSubjects" -}}
- kind: ServiceAccount
  name: {{ include "modelgate.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
The API keys file (README "API keys file"): a YAML list of {name, key | keySha256, models, priority}.
*/}}
{{- define "modelgate.keysFile" -}}
{{- range .Values.auth.keys }}
- name: {{ .name | toJson }}
  {{- if hasKey . "key" }}
  key: {{ .key | toJson }}
  {{- end }}
  {{- if hasKey . "keySha256" }}
  keySha256: {{ .keySha256 | toJson }}
  {{- end }}
  {{- if hasKey . "models" }}
  models: {{ .models | toJson }}
  {{- end }}
  {{- if hasKey . "priority" }}
  priority: {{ .priority | toJson }}
  {{- end }}
{{- end }}
{{- end }}
