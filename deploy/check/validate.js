#!/usr/bin/env node
'use strict';
// Offline checks of deploy/ (run by scripts/check-deploy.sh; no cluster, no network):
//   1. renders the kustomize base and the cpu and gpu overlays (lib/kustomize.js), and compares
//      each with the real kustomize (`kustomize build` or `kubectl kustomize`) where installed;
//   2. validates every rendered object against the Kubernetes API / CRD schemas, rejecting
//      unknown fields and wrong types (lib/schema.js);
//   3. checks Pagoda's own rules per overlay (lib/policy.js): the binaries' flags against the
//      ports, probes and Services, terminationGracePeriodSeconds above --drain-timeout,
//      resources, Prometheus scraping, the read-only model volume, GPUs only where wanted;
//   4. lints the Dockerfiles in deploy/docker (lib/dockerfile.js);
//   5. self-tests: deliberately broken manifests, Dockerfiles and kustomizations (testdata/,
//      and mutations of the real render) must each be rejected with the expected message.
// Prints one PASS/FAIL/SKIP line per check and exits non-zero on any failure.

const childProcess = require('child_process');
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const kustomize = require('./lib/kustomize');
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

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}

// ---- 1. render ------------------------------------------------------------------------------

function render(dir) {
  try {
    return { records: kustomize.build(dir) };
  } catch (error) {
    if (!(error instanceof kustomize.KustomizeError)) throw error;
    return { error: error.message };
  }
}

// The kustomize CLI or the one built into kubectl, if either is installed and is kustomize 4 or
// newer (older ones lack the `patches` field); returns { command, version } or a reason to skip.
function findRealKustomize() {
  const reasons = [];
  for (const command of [['kustomize', 'build'], ['kubectl', 'kustomize']]) {
    const probe = childProcess.spawnSync(command[0], command[0] === 'kubectl' ? ['version', '--client']
      : ['version'], { encoding: 'utf8', timeout: 30000 });
    if (probe.error || probe.status !== 0) continue;
    const found = command[0] === 'kubectl' ? /Kustomize Version: v?((\d+)\.\S+)/.exec(probe.stdout)
      : /v?((\d+)\.\d+\.\d+)/.exec(probe.stdout);
    if (found && Number(found[2]) >= 4) return { command, version: `kustomize v${found[1]}` };
    reasons.push(`${command[0]} has kustomize ${found ? 'v' + found[1] : 'of unknown version'}, older than v4`);
  }
  return { skip: reasons.length ? reasons.join('; ') : 'neither kustomize nor kubectl is installed' };
}

function crossCheck(real, name, dir, records) {
  const result = childProcess.spawnSync(real.command[0], [real.command[1], dir],
    { encoding: 'utf8', timeout: 120000, maxBuffer: 64 << 20 });
  if (result.status !== 0) {
    report(false, `${name}: ${real.command.join(' ')} ${dir}`, (result.stderr || String(result.error)).trim().split('\n'));
    return;
  }
  const theirs = new Map(YAML.parseAllDocuments(result.stdout).map((d) => d.toJS()).filter(Boolean)
    .map((o) => [idOf(o), JSON.stringify(canonical(o))]));
  const ours = new Map(records.map((r) => [idOf(r.object), JSON.stringify(canonical(r.object))]));
  const differences = [];
  for (const id of new Set([...theirs.keys(), ...ours.keys()])) {
    if (!ours.has(id)) differences.push(`${id}: only in kustomize's output`);
    else if (!theirs.has(id)) differences.push(`${id}: only in deploy/check's render`);
    else if (ours.get(id) !== theirs.get(id)) differences.push(`${id}: differs (ours ${ours.get(id)}; kustomize ${theirs.get(id)})`);
  }
  report(differences.length === 0, `${name}: the render equals ${real.command.join(' ')} (${real.version})`, differences);
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
  for (const name of ['base', ...Object.keys(OVERLAYS)]) {
    const dir = name === 'base' ? `${K8S}/base` : `${K8S}/overlays/${name}`;
    const { records, error } = render(dir);
    report(!error, `${name}: render ${dir}` + (records ? ` (${records.length} objects: ${records.map((r) => idOf(r.object)).join(', ')})` : ''),
      error ? [error] : []);
    if (records) { rendered[name] = { dir, records }; sets.push({ name, records }); }
  }

  const real = findRealKustomize();
  if (real.skip) {
    console.log(`SKIP cross-check with the real kustomize: ${real.skip}`);
  } else {
    for (const [name, { dir, records }] of Object.entries(rendered)) crossCheck(real, name, dir, records);
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
  const badPatch = `${TESTDATA}/bad-patch`;
  const badRender = render(badPatch);
  expectRejected(`${badPatch} (kustomization)`, badRender.error ? [badRender.error] : [],
    readExpectations(`${badPatch}/kustomization.yaml`));
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
