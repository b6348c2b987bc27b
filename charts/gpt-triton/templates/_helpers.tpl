{{/* Names and labels. */}}
{{- define "gpt-triton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpt-triton.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "gpt-triton.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "gpt-triton.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpt-triton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpt-triton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpt-triton.labels" -}}
{{ include "gpt-triton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpt-triton
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
Three accounts, least privilege (issue 15 item 8):
- operator: `gpt-triton k8s submit|watch|collect` and the canary (jobs, deployments/scale, leases);
- tuner: the tuning pods, which parse untrusted ONNX: no API permissions, no token mounted
  (unless tuner.promotionLock is "lease", which binds a Role for Leases only);
- serving: the Triton pods: no API permissions, no token.
*/}}
{{- define "gpt-triton.serviceAccountName" -}}
{{- $sa := index .root.Values.serviceAccounts .which }}
{{- if $sa.create }}
{{- default (printf "%s-%s" (include "gpt-triton.fullname" .root | trunc 52 | trimSuffix "-") .which) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{- define "gpt-triton.claimName" -}}
{{- default (printf "%s-data" (include "gpt-triton.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{- define "gpt-triton.tunerImage" -}}
{{- printf "%s:%s" .Values.images.tuner.repository (default .Chart.AppVersion .Values.images.tuner.tag) }}
{{- end }}

{{- define "gpt-triton.tritonImage" -}}
{{- printf "%s:%s" .Values.images.triton.repository .Values.images.triton.tag }}
{{- end }}

{{- define "gpt-triton.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{- define "gpt-triton.podSecurity" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 1000
fsGroup: 1000
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The repository of this GPU product and namespace on the PVC: a release never serves an engine
tuned on another GPU product, and two namespaces sharing one volume never share a repository. */}}
{{- define "gpt-triton.repositoryPath" -}}
{{- printf "/data/repository/%s/%s" .Release.Namespace (ternary .Values.gpu.product "cpu" .Values.gpu.enabled) }}
{{- end }}

{{/* Triton's arguments after the repository and control mode, shared by serving and the tuning sidecar,
so a route is measured under the conditions it will be served in. */}}
{{- define "gpt-triton.tritonArgs" -}}
- --strict-readiness=true
- --http-port=8000
- --grpc-port=8001
- --metrics-port=8002
# p50/p90/p95/p99 summaries (nv_inference_request_summary_us): the canary gates and dashboards read p99.
- --metrics-config=summary_latencies=true
{{- range .Values.triton.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Triton's resources (serving and the tuning sidecar alike), with its one GPU when GPUs are enabled. */}}
{{- define "gpt-triton.tritonResources" -}}
{{- $r := deepCopy .Values.triton.resources }}
{{- if .Values.gpu.enabled }}
{{- $_ := set $r "limits" (merge (dict .Values.gpu.resourceName "1") ($r.limits | default dict)) }}
{{- end }}
{{- toYaml $r }}
{{- end }}

{{/* Pod-level placement and scheduling: GPU node selection plus the values' extensions. */}}
{{- define "gpt-triton.podScheduling" -}}
{{- $selector := deepCopy (.Values.nodeSelector | default dict) }}
{{- if .Values.gpu.enabled }}
{{- $_ := set $selector "nvidia.com/gpu.product" .Values.gpu.product }}
{{- end }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tolerations := concat (ternary .Values.gpu.tolerations list .Values.gpu.enabled) (.Values.tolerations | default list) }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Serving pods only: spread over nodes/zones (the tuning pod is one pod). */}}
{{- define "gpt-triton.topologySpread" -}}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpt-triton.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The exit codes of gpt_triton/core/errors.py, as the Job's podFailurePolicy (the same rules as
gpt_triton/k8s/render.py: a test compares them). 1 (no winner) and 2 (bad input) cannot pass on a retry;
3 (transient: Triton unreachable, lock held) is retried and counts against backoffLimit; a node drain or
preemption is retried without counting.
*/}}
{{- define "gpt-triton.podFailurePolicy" -}}
rules:
  - action: FailJob
    onExitCodes:
      containerName: tuner
      operator: In
      values: [1, 2]
  - action: Count
    onExitCodes:
      containerName: tuner
      operator: In
      values: [3]
  - action: Ignore
    onPodConditions:
      - type: DisruptionTarget
        status: "True"
{{- end }}

{{/*
The tuner Job's spec, used by the CronJob (and by `kubectl create job --from=cronjob/...` for a one-off run).
Mirrors gpt_triton/k8s/render.py (a test compares them): Triton as a native sidecar, `gpt-triton k8s run`
as the main container.
*/}}
{{- define "gpt-triton.tunerJobSpec" -}}
activeDeadlineSeconds: {{ .Values.tuner.activeDeadlineSeconds }}
ttlSecondsAfterFinished: {{ .Values.tuner.ttlSecondsAfterFinished }}
backoffLimit: {{ .Values.tuner.backoffLimit }}
podFailurePolicy:
  {{- include "gpt-triton.podFailurePolicy" . | nindent 2 }}
template:
  metadata:
    labels:
      {{- include "gpt-triton.labels" . | nindent 6 }}
      app.kubernetes.io/component: tuner
      gpt-triton.io/model: {{ .Values.model.name | quote }}
    {{- include "gpt-triton.podAnnotations" . | nindent 4 }}
  spec:
    serviceAccountName: {{ include "gpt-triton.serviceAccountName" (dict "root" . "which" "tuner") }}
    # The tuner parses untrusted ONNX: no API token unless the promotion lock is a Lease.
    automountServiceAccountToken: {{ eq .Values.tuner.promotionLock "lease" }}
    restartPolicy: Never
    securityContext:
      {{- include "gpt-triton.podSecurity" . | nindent 6 }}
    {{- include "gpt-triton.podScheduling" . | nindent 4 }}
    initContainers:
      - name: triton
        image: {{ include "gpt-triton.tritonImage" . }}
        imagePullPolicy: {{ .Values.images.triton.pullPolicy }}
        restartPolicy: Always
        command: [tritonserver]
        args:
          - --model-repository=/staging
          - --model-control-mode=explicit
          - --exit-on-error=false
          {{- include "gpt-triton.tritonArgs" . | nindent 10 }}
        ports:
          - {name: http, containerPort: 8000}
          - {name: grpc, containerPort: 8001}
          - {name: metrics, containerPort: 8002}
        startupProbe:
          httpGet: {path: /v2/health/ready, port: 8000}
          periodSeconds: 5
          timeoutSeconds: 3
          failureThreshold: 120
        livenessProbe:
          httpGet: {path: /v2/health/live, port: 8000}
          periodSeconds: 10
          failureThreshold: 6
        {{- with .Values.extraEnv }}
        env:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        resources:
          {{- include "gpt-triton.tritonResources" . | nindent 10 }}
        securityContext:
          {{- include "gpt-triton.containerSecurity" . | nindent 10 }}
        volumeMounts:
          - {name: staging, mountPath: /staging}
          - {name: triton-tmp, mountPath: /tmp}
          - {name: dshm, mountPath: /dev/shm}
          {{- with .Values.extraVolumeMounts }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
    containers:
      - name: tuner
        image: {{ include "gpt-triton.tunerImage" . }}
        imagePullPolicy: {{ .Values.images.tuner.pullPolicy }}
        command: [gpt-triton]
        args:
          - k8s
          - run
          - --model
          - {{ .Values.model.name | quote }}
          - --spec
          - /etc/gpt-triton/spec.yaml
          - --inputs
          - /data/inputs
          - --runs
          - /data/runs
          - --repository
          - {{ include "gpt-triton.repositoryPath" . }}
          - --triton-url
          - 127.0.0.1:8001
          {{- with .Values.pushgateway.address }}
          - --pushgateway
          - {{ . | quote }}
          {{- end }}
          {{- if .Values.tuner.logBundle }}
          - --log-bundle
          {{- end }}
          {{- with .Values.tuner.extraArgs }}
          - --
          {{- range . }}
          - {{ . | quote }}
          {{- end }}
          {{- end }}
        env:
          - {name: HOME, value: /tmp}
          - name: JOB_NAME
            valueFrom:
              fieldRef: {fieldPath: "metadata.labels['batch.kubernetes.io/job-name']"}
          - name: POD_NAME
            valueFrom:
              fieldRef: {fieldPath: metadata.name}
          - name: POD_NAMESPACE
            valueFrom:
              fieldRef: {fieldPath: metadata.namespace}
          - {name: GPT_TRITON_GPU_PRODUCT, value: {{ ternary .Values.gpu.product "cpu" .Values.gpu.enabled | quote }}}
          {{- if eq .Values.tuner.promotionLock "lease" }}
          - {name: GPT_TRITON_PROMOTION_LOCK, value: lease}
          {{- end }}
          {{- if .Values.signing.enabled }}
          - name: GPT_TRITON_SIGNING_KEY
            valueFrom:
              secretKeyRef:
                name: {{ .Values.signing.secretName | quote }}
                key: {{ .Values.signing.secretKey | quote }}
          {{- end }}
        resources:
          {{- $t := deepCopy .Values.tuner.resources }}
          {{- if and .Values.gpu.enabled (gt (int .Values.tuner.gpus) 0) }}
          {{- $_ := set $t "limits" (merge (dict .Values.gpu.resourceName (toString .Values.tuner.gpus)) ($t.limits | default dict)) }}
          {{- end }}
          {{- toYaml $t | nindent 10 }}
        securityContext:
          {{- include "gpt-triton.containerSecurity" . | nindent 10 }}
        volumeMounts:
          - {name: spec, mountPath: /etc/gpt-triton, readOnly: true}
          - {name: data, mountPath: /data}
          - {name: staging, mountPath: /staging}
          - {name: tuner-tmp, mountPath: /tmp}
    volumes:
      - name: spec
        configMap:
          name: {{ include "gpt-triton.fullname" . }}-spec
      - name: data
        persistentVolumeClaim:
          claimName: {{ include "gpt-triton.claimName" . }}
      - {name: staging, emptyDir: {}}
      - {name: tuner-tmp, emptyDir: {}}
      - {name: triton-tmp, emptyDir: {}}
      - name: dshm
        emptyDir: {medium: Memory, sizeLimit: {{ .Values.triton.shmSize }}}
      {{- with .Values.extraVolumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
{{- end }}
