{{/* The release's full name: the release name, with -keyshare unless it
has it already. */}}
{{- define "keyshare.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of the members' objects and their selector. */}}
{{- define "keyshare.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: member
{{- end -}}

{{- define "keyshare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The seconds a leaving member may take: the drain, then a session TTL
(a member cut off from etcd stops within it), then a margin for closing
its clients. */}}
{{- define "keyshare.gracePeriod" -}}
{{- $least := add .Values.drainTimeoutSeconds .Values.ttlSeconds 10 -}}
{{- $grace := .Values.terminationGracePeriodSeconds | default (add .Values.drainTimeoutSeconds .Values.ttlSeconds 15) -}}
{{- if lt (int $grace) (int $least) -}}
{{- fail (printf "terminationGracePeriodSeconds %v is below drainTimeoutSeconds + ttlSeconds + 10 = %v: the kubelet would kill members mid-drain; raise it or leave it empty" $grace $least) -}}
{{- end -}}
{{- $grace -}}
{{- end -}}
