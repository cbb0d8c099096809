{{/*
The release's base name: the release name when it already says projectmcp, else
<release>-projectmcp; cut to leave room for the suffixes below (-controller, -gateway, -metrics)
within a Service's 63 characters. `helm install projectmcp` names everything as config/default
does: projectmcp-controller, projectmcp-gateway, projectmcp-metrics.
*/}}
{{- define "projectmcp.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "projectmcp.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "projectmcp.labels" -}}
{{ include "projectmcp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "projectmcp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "projectmcp.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "projectmcp.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.variant -}}
{{- $tag = printf "%s-%s" $tag .Values.image.variant -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The URL written to status.endpoint: gateway.url, else the gateway Service's address. */}}
{{- define "projectmcp.gatewayURL" -}}
{{- $scheme := ternary "https" "http" (ne (include "projectmcp.gatewayTLSSecret" .) "") -}}
{{- default (printf "%s://%s-gateway.%s.svc:%v" $scheme (include "projectmcp.fullname" .) .Release.Namespace .Values.gateway.port) .Values.gateway.url -}}
{{- end -}}

{{/*
The Secret the gateway serves TLS with: gateway.tls.secretName, else with a cert-manager
issuer <fullname>-gateway-tls; empty when the gateway serves plain HTTP.
*/}}
{{- define "projectmcp.gatewayTLSSecret" -}}
{{- if .Values.gateway.tls.certManager.issuerRef -}}
{{- default (printf "%s-gateway-tls" (include "projectmcp.fullname" .)) .Values.gateway.tls.secretName -}}
{{- else -}}
{{- .Values.gateway.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* A map as k1=v1,k2=v2 (keys sorted), the form of OTEL_RESOURCE_ATTRIBUTES. */}}
{{- define "projectmcp.keyValues" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}
{{- $pairs = append $pairs (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
