{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "keycap.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "keycap.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "keycap.labels" -}}
{{ include "keycap.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "keycap.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The Secret holding the admin token, if any. */}}
{{- define "keycap.adminSecret" -}}
{{- if .Values.adminToken.existingSecret -}}
{{ .Values.adminToken.existingSecret }}
{{- else if .Values.adminToken.value -}}
{{ include "keycap.fullname" . }}-admin
{{- end -}}
{{- end -}}

{{/* The gateway's configuration file. */}}
{{- define "keycap.config" -}}
{{- range $f := list "listen" "admin" "shutdown_delay" "shutdown_timeout" "store" -}}
{{- if hasKey $.Values.config $f -}}
{{- fail (printf "config.%s is set by the chart: remove it from config (the store is the store value, shutdown_delay shutdownDelay)" $f) -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (eq (toString .Values.store.type) "memory") -}}
{{- fail "store.type memory keeps each replica's caps apart: with replicaCount above 1 use redis, sentinel or cluster" -}}
{{- end -}}
listen: ":8080"
admin: ":9091"
shutdown_delay: {{ .Values.shutdownDelay }}
shutdown_timeout: {{ .Values.shutdownTimeout }}
store:
{{- toYaml (omit .Values.store "passwordSecret") | nindent 2 }}
{{ toYaml .Values.config }}
{{- end -}}

{{/* The gateway's environment: the admin token, the Redis password, env. */}}
{{- define "keycap.env" -}}
{{- if include "keycap.adminSecret" . }}
- name: KEYCAP_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "keycap.adminSecret" . }}
      key: token
{{- end }}
{{- with .Values.store.passwordSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key | default "password" }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}
