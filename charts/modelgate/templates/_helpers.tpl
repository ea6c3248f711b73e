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
{{- include "modelgate.validateRedis" . }}
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
Checks of limits.redis: settings that would do nothing without a URL, a CA without TLS, and a
password in the URL (the config is a ConfigMap, readable by anyone who can read the namespace).
*/}}
{{- define "modelgate.validateRedis" -}}
{{- $redis := .Values.limits.redis }}
{{- if not $redis.url }}
{{- range $name, $set := dict "existingSecret" $redis.existingSecret "tls.enabled" $redis.tls.enabled "tls.caSecret" $redis.tls.caSecret "username" $redis.username }}
{{- if $set }}
{{- fail (printf "limits.redis: %s is set but limits.redis.url is empty; set url (e.g. redis://redis-master.cache:6379/0) or unset %s" $name $name) }}
{{- end }}
{{- end }}
{{- else }}
{{- if (urlParse $redis.url).userinfo }}
{{- fail "limits.redis.url: carries a user or password, which would land in a ConfigMap; put the password in a Secret and set limits.redis.existingSecret (and limits.redis.username for an ACL user)" }}
{{- end }}
{{- if and $redis.tls.caSecret (not (include "modelgate.redisTls" .)) }}
{{- fail "limits.redis.tls.caSecret: set, but the connection to Redis is plain; set limits.redis.tls.enabled or use a rediss:// URL" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"true" when the router talks TLS to Redis (limits.redis.tls.enabled or a rediss:// URL), else empty.
*/}}
{{- define "modelgate.redisTls" -}}
{{- if or .Values.limits.redis.tls.enabled (hasPrefix "rediss://" .Values.limits.redis.url) }}true{{ end }}
{{- end }}

{{/*
The TCP port of limits.redis.url: the URL's, or Redis' 6379 when it has none.
*/}}
{{- define "modelgate.redisPort" -}}
{{- $host := (urlParse .Values.limits.redis.url).host }}
{{- if regexMatch ":[0-9]+$" $host }}
{{- regexFind "[0-9]+$" $host }}
{{- else }}
{{- 6379 }}
{{- end }}
{{- end }}

{{/*
Router replicas the config's limits.redis.expectedRouters assumes until the routers' heartbeat in
Redis says how many there are: autoscaling.minReplicas with the HPA, else replicaCount (at least 1).
*/}}
{{- define "modelgate.expectedRouters" -}}
{{- if .Values.autoscaling.enabled }}
{{- .Values.autoscaling.minReplicas }}
{{- else }}
{{- max 1 .Values.replicaCount }}
{{- end }}
{{- end }}

{{/*
The config's `limits` block: defaults and keyMetrics always; redis only with limits.redis.url, its
password and CA as the files the Deployment mounts from their Secrets.
*/}}
{{- define "modelgate.limitsConfig" -}}
{{- $l := .Values.limits }}
{{- $limits := dict "defaults" $l.defaults "keyMetrics" $l.keyMetrics }}
{{- with $l.redis.url }}
{{- $redis := dict "url" . "tls" $l.redis.tls.enabled "keyPrefix" $l.redis.keyPrefix "timeoutMs" $l.redis.timeoutMs "flushIntervalMs" $l.redis.flushIntervalMs "strict" $l.redis.strict "responsesTtlHours" $l.redis.responsesTtlHours "expectedRouters" (include "modelgate.expectedRouters" $ | atoi) }}
{{- with $l.redis.username }}
{{- $_ := set $redis "username" . }}
{{- end }}
{{- if $l.redis.existingSecret }}
{{- $_ := set $redis "passwordFile" "/etc/modelgate/redis/password" }}
{{- end }}
{{- if $l.redis.tls.caSecret }}
{{- $_ := set $redis "caFile" "/etc/modelgate/redis-tls/ca.crt" }}
{{- end }}
{{- $_ := set $limits "redis" $redis }}
{{- end }}
{{- toYaml $limits }}
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
from `service`, server.shutdownDelayMs/gracePeriodMs from `drain`, `limits` from `limits`,
everything else from `config` (resilience and routing only when set, so an empty block keeps the
router's defaults).
*/}}
{{/*
The ports the router listens on in its container: fixed, above 1024 (a non-root pod without
capabilities may not bind below it on every runtime). The Service maps service.port and
service.adminPort onto them by name.
*/}}
{{- define "modelgate.containerPort" -}}8080{{- end }}
{{- define "modelgate.containerAdminPort" -}}9090{{- end }}

{{- define "modelgate.config" -}}
{{- $c := .Values.config }}
{{- $server := dict "host" "0.0.0.0" "port" (include "modelgate.containerPort" . | int) "shutdownDelayMs" (mul .Values.drain.shutdownDelaySeconds 1000) "gracePeriodMs" (mul .Values.drain.gracePeriodSeconds 1000) }}
{{- $server = merge $server (deepCopy $c.server) }}
{{- $namespaces := list }}
{{- range (include "modelgate.watchedNamespaces" . | splitList "\n") }}
{{- if . }}{{ $namespaces = append $namespaces . }}{{ end }}
{{- end }}
{{- $leader := dict "enabled" $c.leaderElection.enabled "leaseName" ($c.leaderElection.leaseName | default (include "modelgate.fullname" .)) "leaseDurationMs" $c.leaderElection.leaseDurationMs "renewIntervalMs" $c.leaderElection.renewIntervalMs }}
{{- $discovery := dict "mode" "kubernetes" "namespaces" $namespaces "resyncIntervalMs" $c.discovery.resyncIntervalMs "restartBackoffMs" $c.discovery.restartBackoffMs "leaderElection" $leader }}
{{- $config := dict "server" $server "admin" (dict "host" "0.0.0.0" "port" (include "modelgate.containerAdminPort" . | int)) "log" (dict "level" $c.logLevel) "auth" (dict "keysFile" "/etc/modelgate/keys/keys.yaml" "reloadIntervalMs" .Values.auth.reloadIntervalMs) "discovery" $discovery }}
{{- with $c.resilience }}
{{- $_ := set $config "resilience" . }}
{{- end }}
{{- with $c.routing }}
{{- $_ := set $config "routing" . }}
{{- end }}
{{- with $c.priority }}
{{- $_ := set $config "priority" . }}
{{- end }}
{{- with $c.slo }}
{{- $_ := set $config "slo" . }}
{{- end }}
{{- with $c.tracing }}
{{- $_ := set $config "tracing" . }}
{{- end }}
{{- $_ := set $config "limits" (include "modelgate.limitsConfig" . | fromYaml) }}
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
The API keys file (README "API keys file"): a YAML list of {name, key | keySha256, models, priority,
weight, limits}.
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
  {{- if hasKey . "weight" }}
  weight: {{ .weight | toJson }}
  {{- end }}
  {{- if hasKey . "limits" }}
  limits: {{ .limits | toJson }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The settings of one pool's autoscaling block (modelPools[].autoscaling), as YAML: each field the
block leaves out comes from engineAutoscaling.defaults, except that minReplicas defaults to 0 for
kind keda when the pool opts into scale from zero (spec.resilience.scaleFromZero.enabled). Fails on what would scale wrongly: no scale target, zero replicas without scale
from zero (the pool's requests would get 503), zero replicas with an HPA (it cannot scale to zero),
maxReplicas below minReplicas, and KEDA-only settings on an HPA. Takes a dict: root (the chart's
context) and pool (the modelPools[] entry).
*/}}
{{- define "modelgate.engineAutoscaling" -}}
{{- $pool := .pool }}
{{- $a := $pool.autoscaling }}
{{- $d := .root.Values.engineAutoscaling.defaults }}
{{- $where := printf "modelPools[%s].autoscaling" $pool.name }}
{{- $namespace := $pool.namespace | default .root.Release.Namespace }}
{{- $s := dict "name" $pool.name "namespace" $namespace "pool" (printf "%s/%s" $namespace $pool.name) }}
{{- range $key := list "kind" "maxReplicas" "targetRequestsPerReplica" "pollingInterval" "cooldownPeriod" "behavior" }}
{{- $_ := set $s $key (ternary (get $a $key) (get $d $key) (hasKey $a $key)) }}
{{- end }}
{{- $fromZero := dig "resilience" "scaleFromZero" "enabled" false $pool.spec }}
{{- $min := $d.minReplicas }}
{{- if hasKey $a "minReplicas" }}
{{- $min = $a.minReplicas }}
{{- else if and $fromZero (eq $s.kind "keda") }}
{{- $min = 0 }}
{{- end }}
{{- $min = int $min }}
{{- $_ := set $s "minReplicas" $min }}
{{- $ref := $a.scaleTargetRef | default dict }}
{{- if not $ref.name }}
{{- fail (printf "%s.scaleTargetRef.name: empty; name the Deployment in namespace %s that runs the pool's engine (the one its Service %s selects)" $where $namespace $pool.spec.service.name) }}
{{- end }}
{{- $_ := set $s "scaleTargetRef" (dict "apiVersion" ($ref.apiVersion | default "apps/v1") "kind" ($ref.kind | default "Deployment") "name" $ref.name) }}
{{- if lt (int $s.maxReplicas) $min }}
{{- fail (printf "%s: maxReplicas (%d) is below minReplicas (%d); raise maxReplicas or lower minReplicas" $where (int $s.maxReplicas) $min) }}
{{- end }}
{{- if eq $s.kind "hpa" }}
{{- if eq $min 0 }}
{{- fail (printf "%s: minReplicas is 0, but a HorizontalPodAutoscaler cannot scale to zero replicas; set minReplicas to 1 or more, or use kind keda (with the pool's spec.resilience.scaleFromZero.enabled) to scale to zero" $where) }}
{{- end }}
{{- range $key := list "pollingInterval" "cooldownPeriod" }}
{{- if hasKey $a $key }}
{{- fail (printf "%s.%s: a KEDA setting, which kind hpa ignores; remove it (an HPA's pace is set by behavior) or use kind keda" $where $key) }}
{{- end }}
{{- end }}
{{- if gt (len $pool.name) 63 }}
{{- fail (printf "%s: the pool's name is longer than 63 characters, so the HPA's label selector (pool_name) cannot match it; shorten the name or use kind keda" $where) }}
{{- end }}
{{- else if and (eq $min 0) (not $fromZero) }}
{{- fail (printf "%s: minReplicas is 0, but the pool does not opt into scale from zero, so with no replica its requests would fail at once with 503; set the pool's spec.resilience.scaleFromZero.enabled to true, or minReplicas to 1 or more" $where) }}
{{- end }}
{{- toYaml $s }}
{{- end }}
