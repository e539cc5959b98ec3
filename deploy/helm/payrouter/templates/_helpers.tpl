{{/* The release's full name: the Deployment's, the Service's, the ConfigMap's. */}}
{{- define "payrouter.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels every object carries. */}}
{{- define "payrouter.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | toString | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* What selects the instances: the Service's, the PodDisruptionBudget's and the Deployment's
selector. The component keeps the migration Job's pod out of the Service. */}}
{{- define "payrouter.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "payrouter.secretName" -}}
{{- default (include "payrouter.fullname" .) .Values.secret.name -}}
{{- end -}}

{{- define "payrouter.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* payrouter.yaml: .Values.config with the listeners on the chart's ports and
state.database_migrate off while the Job migrates. Written as JSON, which is YAML: every string
stays quoted, so "${PAYROUTER_API_KEY}" is always a string, whatever the key looks like (toYaml
would write it bare, and a value that reads as a number would then become one). */}}
{{- define "payrouter.config" -}}
{{- if or (hasKey .Values.config "listen") (hasKey .Values.config "admin_listen") -}}
{{- fail "config.listen and config.admin_listen are set by the chart from ports.storefront and ports.admin: set those instead" -}}
{{- end -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "listen" (printf ":%d" (int .Values.ports.storefront)) -}}
{{- $_ := set $cfg "admin_listen" (printf ":%d" (int .Values.ports.admin)) -}}
{{- $state := default dict $cfg.state -}}
{{- $_ := set $state "database_migrate" (not .Values.migrations.enabled) -}}
{{- $_ := set $cfg "state" $state -}}
{{- toPrettyJson $cfg -}}
{{- end -}}

{{/* The pod's and the container's security settings, the instances' and the Job's. */}}
{{- define "payrouter.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "payrouter.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
