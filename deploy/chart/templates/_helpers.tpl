{{/* Every object is named timeout-tracer, as in deploy/daemonset.yaml. */}}
{{- define "tt.name" -}}timeout-tracer{{- end -}}

{{- define "tt.labels" -}}
app.kubernetes.io/name: {{ include "tt.name" . }}
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tt.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
