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

{{- define "gpt-triton.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpt-triton.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
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

{{- define "gpt-triton.gpuPlacement" -}}
{{- if .Values.gpu.enabled }}
nodeSelector:
  nvidia.com/gpu.product: {{ .Values.gpu.product | quote }}
{{- with .Values.gpu.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The tuner Job's spec, shared by the Job and the CronJob. Mirrors gpt_triton/k8s/render.py (a test compares
them): Triton as a native sidecar, `gpt-triton k8s run` as the main container.
*/}}
{{- define "gpt-triton.tunerJobSpec" -}}
activeDeadlineSeconds: {{ .Values.tuner.activeDeadlineSeconds }}
ttlSecondsAfterFinished: {{ .Values.tuner.ttlSecondsAfterFinished }}
backoffLimit: {{ .Values.tuner.backoffLimit }}
podFailurePolicy:
  rules:
    # Exit 2 = bad input or failed tuning: retrying cannot help.
    - action: FailJob
      onExitCodes:
        containerName: tuner
        operator: In
        values: [2]
    # A node drain or preemption is retried without counting against backoffLimit.
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
template:
  metadata:
    labels:
      {{- include "gpt-triton.labels" . | nindent 6 }}
      app.kubernetes.io/component: tuner
      gpt-triton.io/model: {{ .Values.model.name | quote }}
  spec:
    serviceAccountName: {{ include "gpt-triton.serviceAccountName" . }}
    restartPolicy: Never
    securityContext:
      {{- include "gpt-triton.podSecurity" . | nindent 6 }}
    {{- with .Values.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with (include "gpt-triton.gpuPlacement" . | trim) }}{{ . | nindent 4 }}{{- end }}
    initContainers:
      - name: triton
        image: {{ include "gpt-triton.tritonImage" . }}
        imagePullPolicy: {{ .Values.images.triton.pullPolicy }}
        restartPolicy: Always
        command: [tritonserver]
        args:
          - --model-repository=/staging
          - --model-control-mode=explicit
          - --strict-readiness=true
          - --http-port=8000
          - --grpc-port=8001
          - --metrics-port=8002
          - --exit-on-error=false
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
        resources:
          {{- $r := deepCopy .Values.tuner.tritonResources }}
          {{- if .Values.gpu.enabled }}
          {{- $_ := set $r "limits" (merge (dict "nvidia.com/gpu" "1") ($r.limits | default dict)) }}
          {{- end }}
          {{- toYaml $r | nindent 10 }}
        securityContext:
          {{- include "gpt-triton.containerSecurity" . | nindent 10 }}
        volumeMounts:
          - {name: staging, mountPath: /staging}
          - {name: triton-tmp, mountPath: /tmp}
          - {name: dshm, mountPath: /dev/shm}
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
          - /data/repository
          - --triton-url
          - 127.0.0.1:8001
          {{- with .Values.pushgateway.address }}
          - --pushgateway
          - {{ . | quote }}
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
          {{- $_ := set $t "limits" (merge (dict "nvidia.com/gpu" (toString .Values.tuner.gpus)) ($t.limits | default dict)) }}
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
        emptyDir: {medium: Memory, sizeLimit: 1Gi}
{{- end }}
