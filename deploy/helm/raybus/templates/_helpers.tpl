{{/*
Shared pieces of the raybus manifests. Object names are fixed (raybus-<component>): the CRDs and the
ClusterRoles are cluster-wide, so a cluster runs one raybus, and the NATS certificate names raybus-nats.
*/}}

{{/* Labels of an object's metadata: dict "root" $ "component" NAME (component may be empty). */}}
{{- define "raybus.labels" -}}
{{- if .component -}}
app.kubernetes.io/name: raybus
app.kubernetes.io/component: {{ .component }}
{{ end -}}
app.kubernetes.io/part-of: raybus
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* What selects a component's pods; never changes between chart versions (selectors are immutable). */}}
{{- define "raybus.selector" -}}
app.kubernetes.io/name: raybus
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* Labels of a component's pod template. */}}
{{- define "raybus.podLabels" -}}
{{ include "raybus.selector" . }}
app.kubernetes.io/part-of: raybus
{{- end }}

{{- define "raybus.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The image of a raybus container, and its pull policy when one is set. */}}
{{- define "raybus.containerImage" -}}
image: {{ include "raybus.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* Where the services reach NATS: the bundled cluster's Service, or nats.external.url. */}}
{{- define "raybus.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{ ternary "tls" "nats" .Values.nats.tls.enabled }}://raybus-nats:4222
{{- else -}}
{{ required "nats.external.url is required when nats.enabled is false" .Values.nats.external.url }}
{{- end -}}
{{- end }}

{{/* Stream replicas of the topology: nats.streamReplicas, else one per bundled server up to 3. */}}
{{- define "raybus.streamReplicas" -}}
{{- if .Values.nats.streamReplicas -}}
{{ .Values.nats.streamReplicas }}
{{- else if .Values.nats.enabled -}}
{{ min (int .Values.nats.replicas) 3 }}
{{- else -}}
{{ fail "nats.streamReplicas is required with an external NATS (nats.enabled: false): the replicas its JetStream cluster can hold" }}
{{- end -}}
{{- end }}

{{/* Flags every service takes after its own: partitions and log level when set. */}}
{{- define "raybus.commonArgs" -}}
- --nats-url={{ include "raybus.natsUrl" . }}
- --no-ensure-topology
- --bind-address=0.0.0.0
- --health-port=8081
- --metrics-port=9090
{{- end }}

{{- define "raybus.tuningArgs" -}}
{{- $args := list -}}
{{- with .Values.partitions }}{{ $args = append $args (printf "--partitions=%v" .) }}{{ end -}}
{{- with .Values.logLevel }}{{ $args = append $args (printf "--log-level=%s" .) }}{{ end -}}
{{- with $args }}{{ toYaml . }}{{ end -}}
{{- end }}

{{/* The NATS user of a service and its password from the users Secret: dict "root" $ "user" NAME. */}}
{{- define "raybus.natsEnv" -}}
- name: RAYBUS_NATS_USER
  value: {{ .user }}
- name: RAYBUS_NATS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .root.Values.nats.auth.secretName }}, key: {{ .user }}}}
{{- if .root.Values.nats.tls.enabled }}
- name: RAYBUS_NATS_TLS_CA
  value: /etc/raybus/nats-tls/ca.crt
{{- end }}
{{- end }}

{{- define "raybus.natsCaMount" -}}
{{- if .Values.nats.tls.enabled -}}
- {name: nats-ca, mountPath: /etc/raybus/nats-tls, readOnly: true}
{{- end -}}
{{- end }}

{{/* Only the CA that signed the NATS servers' certificate (their key stays with them). */}}
{{- define "raybus.natsCaVolume" -}}
{{- if .Values.nats.tls.enabled -}}
- name: nats-ca
  secret:
    secretName: {{ .Values.nats.tls.secretName }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- end }}

{{- define "raybus.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "raybus.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{- define "raybus.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "raybus.selector" . | nindent 8 }}
{{- end }}

{{/*
Pull secrets and placement of a pod: dict "root" $ "own" <the component's values>. A component's
nodeSelector, tolerations or affinity replaces the chart-wide one when set.
*/}}
{{- define "raybus.scheduling" -}}
{{- $pod := dict -}}
{{- with .root.Values.imagePullSecrets }}{{ $_ := set $pod "imagePullSecrets" . }}{{ end -}}
{{- with (.own.nodeSelector | default .root.Values.nodeSelector) }}{{ $_ := set $pod "nodeSelector" . }}{{ end -}}
{{- with (.own.tolerations | default .root.Values.tolerations) }}{{ $_ := set $pod "tolerations" . }}{{ end -}}
{{- with (.own.affinity | default .root.Values.affinity) }}{{ $_ := set $pod "affinity" . }}{{ end -}}
{{- with $pod }}{{ toYaml . }}{{ end -}}
{{- end }}

{{- define "raybus.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: health}
  periodSeconds: 5
  failureThreshold: 3
{{- end }}

{{/* The ports of the NATS client connections the services make (external URLs may name others). */}}
{{- define "raybus.natsPorts" -}}
{{- $ports := list -}}
{{- if .Values.nats.enabled -}}
{{- $ports = list 4222 -}}
{{- else -}}
{{- range splitList "," .Values.nats.external.url -}}
{{- $host := (urlParse (trim .)).host -}}
{{- $port := 4222 -}}
{{- if regexMatch ":[0-9]+$" $host -}}
{{- $port = int (regexFind "[0-9]+$" $host) -}}
{{- end -}}
{{- $ports = append $ports $port -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end }}

{{/* The egress rule to NATS: the bundled servers' pods, or any address on the external URLs' ports. */}}
{{- define "raybus.natsEgress" -}}
{{- if .Values.nats.enabled -}}
- to:
    - podSelector:
        matchLabels:
          {{- include "raybus.selector" "nats" | nindent 10 }}
  ports:
    - {protocol: TCP, port: 4222}
{{- else -}}
# The external NATS servers (wherever they run, so any destination on their ports).
- ports:
    {{- range (include "raybus.natsPorts" . | fromJsonArray) }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end }}
{{- end }}

{{/* The Kubernetes API server (its address depends on the cluster, so any destination on its ports). */}}
{{- define "raybus.apiServerEgress" -}}
- ports:
    - {protocol: TCP, port: 443}
    - {protocol: TCP, port: 6443}
{{- end }}

{{/* A PodDisruptionBudget keeping one pod of a component up: only with more than one replica. */}}
{{- define "raybus.pdb" -}}
{{- if and .root.Values.podDisruptionBudget.enabled (gt (int .replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  {{- include "raybus.metadata" . | nindent 2 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "raybus.selector" .component | nindent 6 }}
{{- end }}
{{- end }}

{{/* The metrics Service of a component. */}}
{{- define "raybus.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  {{- include "raybus.metadata" (merge (dict "name" (printf "raybus-%s-metrics" .component)) .) | nindent 2 }}
spec:
  selector:
    {{- include "raybus.selector" .component | nindent 4 }}
  ports:
    - {name: metrics, port: 9090, targetPort: metrics}
{{- end }}

{{/* --feature-gates from the featureGates list (KubeRay's chart's shape). */}}
{{- define "raybus.featureGates" -}}
{{- $gates := list -}}
{{- range .Values.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" .name .enabled) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end }}

{{/* --watch-namespace of the watch side, or nothing when it watches every namespace. */}}
{{- define "raybus.watchNamespaceArg" -}}
{{- if and .Values.singleNamespaceInstall .Values.watchNamespace -}}
{{ fail "set singleNamespaceInstall (watch the release's namespace) or watchNamespace (watch these namespaces), not both" }}
{{- else if .Values.singleNamespaceInstall -}}
--watch-namespace=$(POD_NAMESPACE)
{{- else if .Values.watchNamespace -}}
--watch-namespace={{ join "," .Values.watchNamespace }}
{{- end -}}
{{- end }}

{{/* The namespaces the watcher roles get namespaced Roles in, or none (ClusterRoles). */}}
{{- define "raybus.roleNamespaces" -}}
{{- if .Values.singleNamespaceInstall -}}
{{ toJson (list .Release.Namespace) }}
{{- else -}}
{{ toJson .Values.watchNamespace }}
{{- end -}}
{{- end }}

{{/*
An object's metadata: dict "root" $ "name" NAME "component" COMPONENT, with "namespace" NS for another
namespace than the release's and "clusterScoped" true for cluster-wide kinds.
*/}}
{{- define "raybus.metadata" -}}
name: {{ .name }}
{{- if not .clusterScoped }}
namespace: {{ .namespace | default .root.Release.Namespace }}
{{- end }}
labels:
  {{- include "raybus.labels" . | nindent 2 }}
{{- end }}
