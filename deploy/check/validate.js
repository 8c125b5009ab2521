#!/usr/bin/env node
'use strict';
// Offline checks of deploy/ (run by scripts/check-deploy.sh; no cluster, no network):
//   1. renders the kustomize base and the cpu and gpu overlays with the real kustomize
//      (`kubectl kustomize DIR`, or `kustomize build DIR`; v4 or newer), which also rejects
//      whatever kustomize rejects (a patch that matches nothing, a missing resource, ...);
//   2. validates every rendered object against the Kubernetes API / CRD schemas, rejecting
//      unknown fields and wrong types (lib/schema.js);
//   3. checks Pagoda's own rules per overlay (lib/policy.js): the binaries' flags against the
//      ports, probes and Services, terminationGracePeriodSeconds above --drain-timeout,
//      resources, Prometheus scraping, the read-only model volume, GPUs only where wanted;
//   4. lints the Dockerfiles in deploy/docker (lib/dockerfile.js);
//   5. self-tests: deliberately broken manifests, Dockerfiles and kustomizations (testdata/,
//      and mutations of the real render) must each be rejected with the expected message.
// Prints one PASS/FAIL line per check and exits non-zero on any failure.

const childProcess = require('child_process');
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const schema = require('./lib/schema');
const policy = require('./lib/policy');
const dockerfile = require('./lib/dockerfile');

const REPO = path.resolve(__dirname, '..', '..');
process.chdir(REPO);
const K8S = 'deploy/k8s';
const TESTDATA = 'deploy/check/testdata';
const OVERLAYS = {
  cpu: { backend: 'cpu', gpusPerWorker: 0 },
  gpu: { backend: 'cuda', gpusPerWorker: 1 },
};
const DOCKERFILES = ['deploy/docker/scheduler.Dockerfile', 'deploy/docker/worker.Dockerfile'];

let passed = 0;
let failed = 0;

function report(ok, name, details = []) {
  if (ok) passed++; else failed++;
  console.log(`${ok ? 'PASS' : 'FAIL'} ${name}`);
  for (const line of details) console.log(`     ${line}`);
}

function formatErrors(errors) {
  return errors.map((e) => (typeof e === 'string' ? e
    : `${e.record ? schema.describe(e.record) + ': ' : ''}${e.message}`));
}

function idOf(object) {
  return `${object.kind}/${object.metadata.namespace ? object.metadata.namespace + '/' : ''}${object.metadata.name}`;
}

// ---- 1. render ------------------------------------------------------------------------------

const INSTALL_HINT = 'install kubectl (https://kubernetes.io/docs/tasks/tools/; it includes kustomize) ' +
  'or the kustomize CLI (https://kubectl.docs.kubernetes.io/installation/kustomize/)';

// The kustomize built into kubectl, or the kustomize CLI, if it is kustomize 4 or newer (older
// ones lack the `patches` field); returns { command, version } or { error }.
function findKustomize() {
  const reasons = [];
  for (const command of [['kubectl', 'kustomize'], ['kustomize', 'build']]) {
    const probe = childProcess.spawnSync(command[0], command[0] === 'kubectl' ? ['version', '--client']
      : ['version'], { encoding: 'utf8', timeout: 30000 });
    if (probe.error || probe.status !== 0) continue;
    const found = command[0] === 'kubectl' ? /Kustomize Version: v?((\d+)\.\S+)/.exec(probe.stdout)
      : /v?((\d+)\.\d+\.\d+)/.exec(probe.stdout);
    if (found && Number(found[2]) >= 4) return { command, version: `kustomize v${found[1]}` };
    reasons.push(`${command[0]} has kustomize ${found ? 'v' + found[1] : 'of unknown version'}, older than v4`);
  }
  return { error: `${reasons.length ? reasons.join('; ') : 'neither kubectl nor kustomize is installed'}: ${INSTALL_HINT}` };
}

// Renders a kustomization directory; returns { records } (records are { object, source }, source
// naming the directory rendered, for error messages) or { error } with kustomize's message.
function render(tool, dir) {
  const result = childProcess.spawnSync(tool.command[0], [tool.command[1], dir],
    { encoding: 'utf8', timeout: 120000, maxBuffer: 64 << 20 });
  if (result.error || result.status !== 0) {
    const message = (result.stderr || String(result.error || `exit status ${result.status}`)).trim()
      .split('\n').map((line) => line.replace(/^[EWIF]\d{4} [\d:.]+\s+\d+ \S+\] /, '').trim())
      .filter(Boolean).join('\n');
    return { error: `${tool.command.join(' ')} ${dir} failed:\n${message}` };
  }
  const docs = YAML.parseAllDocuments(result.stdout);
  const broken = docs.find((d) => d.errors.length > 0);
  if (broken) return { error: `${tool.command.join(' ')} ${dir}: unreadable output: ${broken.errors[0].message}` };
  const source = `rendered from ${dir}`;
  return { records: docs.map((d) => d.toJS()).filter(Boolean).map((object) => ({ object, source })) };
}

// ---- 5. self-tests --------------------------------------------------------------------------

function readExpectations(file) {
  return fs.readFileSync(file, 'utf8').split('\n')
    .map((line) => /^#\s*expect:\s*(.+?)\s*$/.exec(line)).filter(Boolean).map((m) => m[1]);
}

// A negative test passes when the check found errors and every expected message is among them.
function expectRejected(name, errors, expected) {
  const messages = formatErrors(errors);
  const missing = expected.filter((want) => !messages.some((m) => m.includes(want)));
  if (messages.length === 0) {
    report(false, `self-test: ${name} was accepted, but must be rejected`);
  } else {
    report(missing.length === 0, `self-test: ${name} is rejected`,
      missing.length ? [...missing.map((m) => `expected an error containing: ${m}`), 'got:', ...messages]
        : messages.map((m) => `rejected: ${m}`));
  }
}

function mutated(records, component, mutate) {
  const copy = records.map((r) => ({ ...r, object: JSON.parse(JSON.stringify(r.object)) }));
  const target = copy.find((r) => r.object.kind === 'Deployment' &&
    r.object.metadata.labels['app.kubernetes.io/component'] === component);
  mutate(target.object.spec.template.spec);
  return copy;
}

// ---- main -----------------------------------------------------------------------------------

function main() {
  const sets = [];
  const rendered = {};
  const tool = findKustomize();
  if (tool.error) {
    report(false, 'render the kustomizations in deploy/k8s: needs kustomize v4 or newer', [tool.error]);
  } else {
    for (const name of ['base', ...Object.keys(OVERLAYS)]) {
      const dir = name === 'base' ? `${K8S}/base` : `${K8S}/overlays/${name}`;
      const { records, error } = render(tool, dir);
      report(!error, `${name}: ${tool.command.join(' ')} ${dir} (${tool.version})` +
        (records ? `: ${records.length} objects: ${records.map((r) => idOf(r.object)).join(', ')}` : ''),
        error ? error.split('\n') : []);
      if (records) { rendered[name] = { dir, records }; sets.push({ name, records }); }
    }
  }

  // Negative fixtures are type-checked in the same TypeScript program as the real manifests.
  const fixtures = ['unknown-field.yaml', 'wrong-type.yaml', 'unknown-kind.yaml'].map((file) => {
    const source = `${TESTDATA}/${file}`;
    const records = YAML.parseAllDocuments(fs.readFileSync(source, 'utf8')).map((d) => d.toJS())
      .filter(Boolean).map((object) => ({ object, source }));
    return { name: `fixture ${file}`, source, records };
  });
  const typeErrors = schema.typeCheck([...sets, ...fixtures]);

  for (const { name, records } of sets) {
    const errors = [...schema.validateWithSchemas(records), ...typeErrors.get(name)];
    report(errors.length === 0, `${name}: every object matches its Kubernetes API schema, no unknown fields`, formatErrors(errors));
  }
  for (const [name, expect] of Object.entries(OVERLAYS)) {
    if (!rendered[name]) continue;
    const errors = policy.check(rendered[name].records, expect);
    report(errors.length === 0, `${name}: Pagoda rules (flags, ports, probes, drain vs grace period, ` +
      `resources, metrics, model volume, ${expect.gpusPerWorker} GPU per worker)`, formatErrors(errors));
  }
  for (const file of DOCKERFILES) {
    if (!fs.existsSync(file)) { report(false, `lint ${file}`, ['missing']); continue; }
    const errors = dockerfile.lint(file, REPO);
    report(errors.length === 0, `lint ${file}`, errors);
  }

  for (const fixture of fixtures) {
    expectRejected(fixture.source, [...schema.validateWithSchemas(fixture.records), ...typeErrors.get(fixture.name)],
      readExpectations(fixture.source));
  }
  const brokenDockerfile = `${TESTDATA}/broken.Dockerfile`;
  expectRejected(brokenDockerfile, dockerfile.lint(brokenDockerfile, REPO), readExpectations(brokenDockerfile));
  if (!tool.error) {
    const badPatch = `${TESTDATA}/bad-patch`;
    const badRender = render(tool, badPatch);
    expectRejected(`${badPatch} (kustomization)`, badRender.error ? [badRender.error] : [],
      readExpectations(`${badPatch}/kustomization.yaml`));
  }
  if (rendered.gpu) {
    const { records } = rendered.gpu;
    expectRejected('gpu render with terminationGracePeriodSeconds = --drain-timeout',
      policy.check(mutated(records, 'scheduler', (spec) => {
        const flags = policy.parseFlags(policy.expandArgs(spec.containers[0]));
        spec.terminationGracePeriodSeconds = Number(flags.get('drain-timeout'));
      }), OVERLAYS.gpu), ['must exceed --drain-timeout']);
    expectRejected('gpu render without the worker GPU limit',
      policy.check(mutated(records, 'worker', (spec) => {
        delete spec.containers[0].resources.limits['nvidia.com/gpu'];
      }), OVERLAYS.gpu), ['this overlay wants 1 per worker']);
  }

  console.log(`deploy check: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main();
