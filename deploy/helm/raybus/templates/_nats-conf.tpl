{{/* nats.conf of the bundled servers. Variables ($SERVER_NAME, $RAYBUS_NATS_*_PASSWORD) come from the pod's environment. */}}
{{- define "raybus.natsConf" -}}
server_name: $SERVER_NAME
listen: 0.0.0.0:4222
http: 0.0.0.0:8222
pid_file: /var/run/nats/nats.pid
lame_duck_duration: 30s
lame_duck_grace_period: 10s
max_payload: 8MB
{{- if .Values.nats.tls.enabled }}

# Client connections are TLS only, with the certificate of the Secret nats.tls.secretName; the services
# verify it against its ca.crt. The monitor port stays plain HTTP for the kubelet's probes.
tls {
  cert_file: /etc/nats-tls/tls.crt
  key_file: /etc/nats-tls/tls.key
  ca_file: /etc/nats-tls/ca.crt
  timeout: 2
}
{{- end }}

jetstream {
  store_dir: /data/jetstream
  max_file_store: {{ .Values.nats.jetstream.maxFileStore }}
  max_memory_store: {{ .Values.nats.jetstream.maxMemoryStore }}
}
{{- if gt (int .Values.nats.replicas) 1 }}

cluster {
  name: raybus
  listen: 0.0.0.0:6222
  # Routes are reachable only from the NATS pods (NetworkPolicy raybus-nats).
  routes: [
{{- range $i := until (int .Values.nats.replicas) }}
    nats://raybus-nats-{{ $i }}.raybus-nats-headless:6222
{{- end }}
  ]
}
{{- end }}

include ./auth.conf
{{- end }}

{{/* GOMEMLIMIT of the NATS servers: nine tenths of their memory limit (Mi or Gi), in MiB. */}}
{{- define "raybus.natsGoMemLimit" -}}
{{- $limit := .Values.nats.resources.limits.memory | toString -}}
{{- $mib := 0 -}}
{{- if hasSuffix "Gi" $limit -}}
{{- $mib = mul (trimSuffix "Gi" $limit | int) 1024 -}}
{{- else if hasSuffix "Mi" $limit -}}
{{- $mib = trimSuffix "Mi" $limit | int -}}
{{- else -}}
{{- fail (printf "nats.resources.limits.memory must be a whole number of Mi or Gi, not %q" $limit) -}}
{{- end -}}
{{ div (mul $mib 9) 10 }}MiB
{{- end }}
