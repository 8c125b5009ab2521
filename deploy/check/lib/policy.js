'use strict';
// Pagoda's own rules for a rendered overlay, on top of the API schemas: things the API server
// accepts but that would break or degrade a Pagoda deployment. Each rule names what is wrong and
// what was expected. check(records, expect) returns [{ record, message }]; `expect` says what
// the overlay is for: { backend: 'cpu' | 'cuda', gpusPerWorker: N }.

const SCHEDULER_FLAGS = ['listen', 'model', 'metrics-listen', 'drain-timeout', 'log-level'];
const WORKER_FLAGS = ['scheduler', 'model', 'backend', 'health-listen', 'metrics-listen', 'log-level'];
const LOG_LEVELS = ['debug', 'info', 'warning', 'error'];
const WORKLOAD_KINDS = new Set(['Deployment', 'StatefulSet']);
const CLUSTER_SCOPED_KINDS = new Set(['Namespace', 'PersistentVolume', 'StorageClass', 'ClusterRole',
  'ClusterRoleBinding', 'PriorityClass', 'RuntimeClass']);
const GPU = 'nvidia.com/gpu';

// ---- helpers --------------------------------------------------------------------------------

const QUANTITY_SUFFIXES = {
  m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40,
};

function parseQuantity(value) {
  const match = /^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(String(value));
  return match ? Number(match[1]) * QUANTITY_SUFFIXES[match[2] || ''] : NaN;
}

function selectorMatches(selector, labels) {
  const wanted = (selector && (selector.matchLabels || selector)) || {};
  if (Object.keys(wanted).length === 0) return false;  // an empty selector is a mistake here
  return Object.entries(wanted).every(([key, value]) => (labels || {})[key] === value);
}

// Kubernetes expands $(VAR) in args from the container's literal env values ($$ escapes).
function expandArgs(container) {
  const values = new Map((container.env || []).filter((e) => e.value !== undefined)
    .map((e) => [e.name, String(e.value)]));
  return (container.args || []).map((arg) => String(arg).replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g,
    (whole, name) => (whole === '$$' ? '$' : values.has(name) ? values.get(name) : whole)));
}

// "--drain-timeout=30", "--drain_timeout 30" -> Map { 'drain-timeout' => '30' }.
function parseFlags(args) {
  const flags = new Map();
  for (let i = 0; i < args.length; i++) {
    const match = /^--?([A-Za-z0-9_-]+)(?:=(.*))?$/.exec(args[i]);
    if (!match) continue;
    const name = match[1].replace(/_/g, '-');
    if (match[2] !== undefined) {
      flags.set(name, match[2]);
    } else if (i + 1 < args.length && !String(args[i + 1]).startsWith('-')) {
      flags.set(name, args[++i]);
    } else {
      flags.set(name, 'true');
    }
  }
  return flags;
}

function portOf(address) {
  const match = /^(.*):([0-9]+)$/.exec(address || '');
  return match ? { host: match[1], port: Number(match[2]) } : null;
}

function namedPort(container, name) {
  const port = (container.ports || []).find((p) => p.name === name);
  return port ? port.containerPort : undefined;
}

function podSpec(object) {
  return object.spec && object.spec.template && object.spec.template.spec;
}

// ---- rules ----------------------------------------------------------------------------------

class Checker {
  constructor(records, expect) {
    this.records = records;
    this.expect = expect;
    this.errors = [];
    this.workloads = records.filter((r) => WORKLOAD_KINDS.has(r.object.kind) && podSpec(r.object));
  }

  error(record, message) {
    this.errors.push({ record, message: `policy: ${message}` });
  }

  byComponent(component) {
    const found = this.workloads.filter((r) =>
      (r.object.metadata.labels || {})['app.kubernetes.io/component'] === component);
    if (found.length !== 1) {
      this.error(null, `expected exactly one workload labelled app.kubernetes.io/component=${component}, ` +
        `found ${found.length}`);
    }
    return found[0];
  }

  podsSelectedBy(selector) {
    return this.workloads.filter((r) => selectorMatches(selector, r.object.spec.template.metadata.labels));
  }

  checkNamespaces() {
    const namespaces = this.records.filter((r) => r.object.kind === 'Namespace').map((r) => r.object.metadata.name);
    for (const record of this.records) {
      if (CLUSTER_SCOPED_KINDS.has(record.object.kind)) continue;
      const ns = record.object.metadata.namespace;
      if (!ns || !namespaces.includes(ns)) {
        this.error(record, `namespace ${JSON.stringify(ns)} is not one of the rendered Namespaces ` +
          `(${namespaces.join(', ') || 'none'}); set namespace: in the kustomization`);
      }
    }
  }

  checkWorkload(record) {
    const { object } = record;
    const spec = podSpec(object);
    const template = object.spec.template.metadata || {};
    if (!selectorMatches(object.spec.selector, template.labels)) {
      this.error(record, 'spec.selector does not match the pod template labels');
    }
    if (!(spec.securityContext && spec.securityContext.runAsNonRoot === true)) {
      this.error(record, 'pods must set securityContext.runAsNonRoot: true');
    }
    const annotations = template.annotations || {};
    const metricsPorts = spec.containers.map((c) => namedPort(c, 'metrics')).filter((p) => p !== undefined);
    if (annotations['prometheus.io/scrape'] !== 'true' ||
        !metricsPorts.includes(Number(annotations['prometheus.io/port'])) ||
        !/^\//.test(annotations['prometheus.io/path'] || '')) {
      this.error(record, `pod annotations must say prometheus.io/scrape: "true", prometheus.io/port: ` +
        `the container port named metrics (${metricsPorts.join(', ') || 'none declared'}), ` +
        `prometheus.io/path: /metrics; found ${JSON.stringify(annotations)}`);
    }
    for (const container of spec.containers) this.checkContainer(record, container);
    this.checkVolumes(record, spec);
  }

  checkContainer(record, container) {
    const where = `container ${container.name}`;
    const resources = container.resources || {};
    for (const kind of ['requests', 'limits']) {
      for (const resource of ['cpu', 'memory']) {
        if (!resources[kind] || resources[kind][resource] === undefined) {
          this.error(record, `${where}: resources.${kind}.${resource} is missing`);
        }
      }
    }
    for (const [resource, request] of Object.entries(resources.requests || {})) {
      const limit = (resources.limits || {})[resource];
      if (limit !== undefined && parseQuantity(request) > parseQuantity(limit)) {
        this.error(record, `${where}: requests.${resource} ${request} exceeds limits.${resource} ${limit}`);
      }
    }
    const ports = (container.ports || []).map((p) => p.containerPort);
    for (const probe of ['readinessProbe', 'livenessProbe']) {
      const grpc = container[probe] && container[probe].grpc;
      if (!grpc) {
        this.error(record, `${where}: ${probe} must be a native gRPC probe (grpc: {port: ...})`);
      } else if (!ports.includes(grpc.port)) {
        this.error(record, `${where}: ${probe} port ${grpc.port} is not a declared container port (${ports.join(', ')})`);
      }
    }
    const lastPart = container.image.slice(container.image.lastIndexOf('/') + 1);
    const tag = lastPart.includes(':') ? lastPart.split(':').pop() : '';
    if (!/@sha256:[0-9a-f]{64}$/.test(container.image) && (tag === '' || tag === 'latest')) {
      this.error(record, `${where}: image ${container.image} needs an explicit tag or digest (not latest)`);
    }
  }

  checkVolumes(record, spec) {
    const claims = new Set(this.records.filter((r) => r.object.kind === 'PersistentVolumeClaim')
      .map((r) => r.object.metadata.name));
    const pvcVolumes = new Set();
    for (const volume of spec.volumes || []) {
      if (!volume.persistentVolumeClaim) continue;
      pvcVolumes.add(volume.name);
      if (!claims.has(volume.persistentVolumeClaim.claimName)) {
        this.error(record, `volume ${volume.name}: PersistentVolumeClaim ` +
          `${volume.persistentVolumeClaim.claimName} is not in the rendered manifests`);
      }
    }
    for (const container of spec.containers) {
      const model = parseFlags(expandArgs(container)).get('model');
      if (model === undefined) continue;
      const mount = (container.volumeMounts || []).find((m) =>
        pvcVolumes.has(m.name) && model.startsWith(m.mountPath.replace(/\/?$/, '/')));
      if (!mount) {
        this.error(record, `container ${container.name}: --model ${model} is not on a mounted PersistentVolumeClaim`);
      } else if (mount.readOnly !== true) {
        this.error(record, `container ${container.name}: the model volume at ${mount.mountPath} must be mounted readOnly`);
      }
    }
  }

  // The flags of the binaries (the deployment contract) and the ports they must agree with.
  checkFlags(record, container, required) {
    const flags = parseFlags(expandArgs(container));
    for (const flag of required) {
      if (!flags.has(flag)) this.error(record, `container ${container.name}: flag --${flag} is missing`);
    }
    if (flags.has('log-level') && !LOG_LEVELS.includes(flags.get('log-level'))) {
      this.error(record, `--log-level ${flags.get('log-level')}: expected one of ${LOG_LEVELS.join(', ')}`);
    }
    const listenPorts = { listen: 'grpc', 'metrics-listen': 'metrics', 'health-listen': 'health' };
    for (const [flag, portName] of Object.entries(listenPorts)) {
      if (!flags.has(flag)) continue;
      const address = portOf(flags.get(flag));
      if (!address || address.host !== '0.0.0.0') {
        this.error(record, `--${flag} ${flags.get(flag)}: expected 0.0.0.0:PORT (reachable from the kubelet and Prometheus)`);
      } else if (address.port !== namedPort(container, portName)) {
        this.error(record, `--${flag} port ${address.port} differs from the container port named ${portName} ` +
          `(${namedPort(container, portName)})`);
      }
    }
    return flags;
  }

  checkScheduler(record) {
    const container = podSpec(record.object).containers[0];
    const flags = this.checkFlags(record, container, SCHEDULER_FLAGS);
    const drain = Number(flags.get('drain-timeout'));
    const grace = podSpec(record.object).terminationGracePeriodSeconds;
    if (!(Number.isInteger(drain) && drain > 0)) {
      this.error(record, `--drain-timeout ${flags.get('drain-timeout')}: expected a positive number of seconds`);
    } else if (!(Number.isInteger(grace) && grace > drain)) {
      this.error(record, `terminationGracePeriodSeconds ${grace} must exceed --drain-timeout ${drain}, ` +
        'or Kubernetes kills the scheduler while it is still draining');
    }
  }

  checkWorker(record, schedulerRecord) {
    const container = podSpec(record.object).containers[0];
    const flags = this.checkFlags(record, container, WORKER_FLAGS);
    if (flags.has('backend') && flags.get('backend') !== this.expect.backend) {
      this.error(record, `--backend ${flags.get('backend')}: this overlay runs the ${this.expect.backend} backend`);
    }
    if (flags.has('health-listen')) {
      const port = (portOf(flags.get('health-listen')) || {}).port;
      for (const probe of ['readinessProbe', 'livenessProbe']) {
        if (container[probe] && container[probe].grpc && container[probe].grpc.port !== port) {
          this.error(record, `${probe} port ${container[probe].grpc.port} is not --health-listen's port ${port}`);
        }
      }
    }
    const target = portOf(flags.get('scheduler'));
    const service = target && this.records.find((r) => r.object.kind === 'Service' && r.object.metadata.name === target.host);
    if (!service || !(service.object.spec.ports || []).some((p) => p.port === target.port)) {
      this.error(record, `--scheduler ${flags.get('scheduler')}: no rendered Service with that name and port`);
    } else if (schedulerRecord && !selectorMatches(service.object.spec.selector,
      schedulerRecord.object.spec.template.metadata.labels)) {
      this.error(record, `--scheduler ${flags.get('scheduler')}: Service ${target.host} does not select the scheduler pods`);
    }
    const gpus = Number((container.resources.limits || {})[GPU] || 0);
    if (gpus !== this.expect.gpusPerWorker) {
      this.error(record, `limits.${GPU} is ${gpus}; this overlay wants ${this.expect.gpusPerWorker} per worker`);
    }
  }

  checkSelectors() {
    for (const record of this.records) {
      const { kind, spec } = record.object;
      if (kind === 'Service') {
        const pods = this.podsSelectedBy(spec.selector);
        if (pods.length === 0) this.error(record, 'the selector matches no workload');
        for (const port of spec.ports || []) {
          for (const pod of pods) {
            const declared = podSpec(pod.object).containers.flatMap((c) => c.ports || []);
            if (!declared.some((p) => p.name === port.targetPort || p.containerPort === port.targetPort)) {
              this.error(record, `port ${port.name}: targetPort ${port.targetPort} is not a port of ${pod.object.metadata.name}`);
            }
          }
        }
      } else if (kind === 'PodDisruptionBudget') {
        if (this.podsSelectedBy(spec.selector).length === 0) this.error(record, 'the selector matches no workload');
      } else if (kind === 'PodMonitor') {
        const pods = this.podsSelectedBy(spec.selector);
        if (pods.length === 0) this.error(record, 'the selector matches no workload');
        for (const endpoint of spec.podMetricsEndpoints || []) {
          for (const pod of pods) {
            if (!podSpec(pod.object).containers.some((c) => namedPort(c, endpoint.port) !== undefined)) {
              this.error(record, `endpoint port ${endpoint.port} is not a named port of ${pod.object.metadata.name}`);
            }
          }
        }
      }
    }
  }

  run() {
    this.checkNamespaces();
    for (const record of this.workloads) this.checkWorkload(record);
    const scheduler = this.byComponent('scheduler');
    const worker = this.byComponent('worker');
    if (scheduler) this.checkScheduler(scheduler);
    if (worker) this.checkWorker(worker, scheduler);
    for (const record of this.workloads) {
      if (record === worker) continue;
      for (const container of podSpec(record.object).containers) {
        if (((container.resources || {}).limits || {})[GPU] !== undefined) {
          this.error(record, `container ${container.name} requests a GPU; only workers use one`);
        }
      }
    }
    this.checkSelectors();
    return this.errors;
  }
}

function check(records, expect) {
  return new Checker(records, expect).run();
}

module.exports = { check, parseFlags, expandArgs, parseQuantity };
