'use strict';
// A small `kustomize build`: renders a kustomization directory with the features deploy/k8s
// uses — resources (files and directories), namespace, patches (strategic merge and JSON 6902)
// and images — because kustomize itself is neither a Debian nor an npm package. Any other field
// of a kustomization is an error rather than silently ignored, and validate.js compares the
// result with the real kustomize (`kubectl kustomize`) wherever kubectl is installed.
//
// build(dir) returns records { object, source }: the rendered Kubernetes object and the file it
// came from (for error messages).

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const KUSTOMIZATION_FILES = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'];
const SUPPORTED_FIELDS = new Set(['apiVersion', 'kind', 'resources', 'namespace', 'patches', 'images']);
const CLUSTER_SCOPED_KINDS = new Set([
  'Namespace', 'Node', 'PersistentVolume', 'StorageClass', 'ClusterRole', 'ClusterRoleBinding',
  'CustomResourceDefinition', 'PriorityClass', 'RuntimeClass', 'IngressClass',
  'ValidatingWebhookConfiguration', 'MutatingWebhookConfiguration',
]);

// patchMergeKey of the Kubernetes API's lists that strategic merge patches merge item by item;
// every other list is replaced whole, as in the API.
const CONTAINER_LISTS = new Set(['containers', 'initContainers', 'ephemeralContainers']);
const MERGE_KEYS = {
  containers: 'name', initContainers: 'name', ephemeralContainers: 'name', env: 'name',
  volumes: 'name', volumeMounts: 'mountPath', imagePullSecrets: 'name', hostAliases: 'ip',
  topologySpreadConstraints: 'topologyKey', resourceClaims: 'name',
};

class KustomizeError extends Error {}

function fail(message) {
  throw new KustomizeError(message);
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function clone(value) {
  return JSON.parse(JSON.stringify(value));
}

function parseYamlDocuments(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  return docs.map((doc) => {
    if (doc.errors.length > 0) fail(`${file}: YAML error: ${doc.errors[0].message}`);
    return doc.toJS();
  }).filter((object) => object !== null && object !== undefined);
}

function idOf(object) {
  const meta = object.metadata || {};
  return `${object.kind}/${meta.namespace ? meta.namespace + '/' : ''}${meta.name}`;
}

function readKustomization(dir) {
  const file = KUSTOMIZATION_FILES.map((name) => path.join(dir, name)).find(fs.existsSync);
  if (!file) fail(`${dir}: no kustomization.yaml`);
  const docs = parseYamlDocuments(file);
  if (docs.length !== 1 || !isObject(docs[0])) fail(`${file}: expected one YAML mapping`);
  const kustomization = docs[0];
  for (const field of Object.keys(kustomization)) {
    if (!SUPPORTED_FIELDS.has(field)) {
      fail(`${file}: field "${field}" is not supported by deploy/check's renderer ` +
           `(supported: ${[...SUPPORTED_FIELDS].join(', ')}); extend lib/kustomize.js first`);
    }
  }
  if (kustomization.kind !== undefined && kustomization.kind !== 'Kustomization') {
    fail(`${file}: kind must be Kustomization, not ${kustomization.kind}`);
  }
  return { file, kustomization };
}

function loadResources(dir, kustomization, file) {
  const records = [];
  for (const entry of kustomization.resources || []) {
    if (typeof entry !== 'string' || /^[a-z]+:\/\//.test(entry)) {
      fail(`${file}: resource ${JSON.stringify(entry)} must be a local path`);
    }
    const target = path.resolve(dir, entry);
    if (!fs.existsSync(target)) fail(`${file}: resource ${entry} does not exist`);
    if (fs.statSync(target).isDirectory()) {
      records.push(...build(target));
    } else {
      for (const object of parseYamlDocuments(target)) {
        if (!isObject(object) || !object.kind || !object.metadata || !object.metadata.name) {
          fail(`${target}: every document needs kind and metadata.name`);
        }
        records.push({ object, source: path.relative(process.cwd(), target) });
      }
    }
  }
  const seen = new Set();
  for (const { object } of records) {
    const id = idOf(object);
    if (seen.has(id)) fail(`${file}: ${id} is defined twice`);
    seen.add(id);
  }
  return records;
}

// ---- strategic merge patch ----------------------------------------------------------------

function listMergeKey(field, parentField) {
  if (field === 'ports') return CONTAINER_LISTS.has((parentField || '').replace(/\[\]$/, '')) ? 'containerPort' : 'port';
  return MERGE_KEYS[field];
}

// Merges `patch` into `base` (a copy is returned). `field` is the name of the field being merged
// ("containers[]" for an item of containers) and `parentField` that of the enclosing object, for
// the merge keys of lists.
function strategicMerge(base, patch, field, parentField) {
  if (isObject(patch)) {
    if (!isObject(base)) base = {};
    const result = { ...base };
    for (const [key, value] of Object.entries(patch)) {
      if (key.startsWith('$')) fail(`patch directive ${key} is not supported by the renderer`);
      if (value === null) {
        delete result[key];
      } else {
        result[key] = strategicMerge(result[key], value, key, field);
      }
    }
    return result;
  }
  if (Array.isArray(patch)) {
    const key = listMergeKey(field, parentField);
    if (!key || !Array.isArray(base)) return clone(patch);
    // As kustomize orders a merged list: the patch's items in the patch's order (merged with
    // the base's item of the same key), then the base's other items in the base's order.
    const result = [];
    for (const item of patch) {
      if (!isObject(item) || item[key] === undefined) {
        fail(`patch item of ${field} needs its merge key ${key}: ${JSON.stringify(item)}`);
      }
      const existing = base.find((b) => isObject(b) && b[key] === item[key]);
      result.push(existing ? strategicMerge(clone(existing), item, `${field}[]`, field) : clone(item));
    }
    const patched = new Set(patch.map((item) => item[key]));
    result.push(...base.filter((b) => !(isObject(b) && patched.has(b[key]))).map(clone));
    return result;
  }
  return patch;
}

// ---- JSON 6902 patch ------------------------------------------------------------------------

function pointerTokens(pointer) {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) fail(`JSON pointer "${pointer}" must start with /`);
  return pointer.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function resolveParent(document, pointer) {
  const tokens = pointerTokens(pointer);
  if (tokens.length === 0) fail('JSON patch operations on the whole document are not supported');
  let node = document;
  for (const token of tokens.slice(0, -1)) {
    node = Array.isArray(node) ? node[Number(token)] : isObject(node) ? node[token] : undefined;
    if (node === undefined) fail(`JSON pointer ${pointer}: ${token} does not exist`);
  }
  return { parent: node, last: tokens[tokens.length - 1] };
}

function jsonGet(document, pointer) {
  const { parent, last } = resolveParent(document, pointer);
  const value = Array.isArray(parent) ? parent[Number(last)] : parent[last];
  if (value === undefined) fail(`JSON pointer ${pointer} does not exist`);
  return value;
}

function jsonRemove(document, pointer) {
  const value = jsonGet(document, pointer);
  const { parent, last } = resolveParent(document, pointer);
  if (Array.isArray(parent)) parent.splice(Number(last), 1); else delete parent[last];
  return value;
}

function jsonAdd(document, pointer, value) {
  const { parent, last } = resolveParent(document, pointer);
  if (Array.isArray(parent)) {
    const index = last === '-' ? parent.length : Number(last);
    if (!(index >= 0 && index <= parent.length)) fail(`JSON pointer ${pointer}: index out of range`);
    parent.splice(index, 0, clone(value));
  } else if (isObject(parent)) {
    parent[last] = clone(value);
  } else {
    fail(`JSON pointer ${pointer}: parent is not an object or list`);
  }
}

function applyJsonPatch(document, operations) {
  for (const op of operations) {
    switch (op.op) {
      case 'add': jsonAdd(document, op.path, op.value); break;
      case 'remove': jsonRemove(document, op.path); break;
      case 'replace': jsonRemove(document, op.path); jsonAdd(document, op.path, op.value); break;
      case 'move': jsonAdd(document, op.path, jsonRemove(document, op.from)); break;
      case 'copy': jsonAdd(document, op.path, jsonGet(document, op.from)); break;
      case 'test':
        if (JSON.stringify(jsonGet(document, op.path)) !== JSON.stringify(op.value)) {
          fail(`JSON patch test failed at ${op.path}`);
        }
        break;
      default: fail(`unknown JSON patch operation ${JSON.stringify(op.op)}`);
    }
  }
}

// ---- patches: field -------------------------------------------------------------------------

function matchesTarget(object, target) {
  const [group, version] = object.apiVersion.includes('/')
    ? object.apiVersion.split('/') : ['', object.apiVersion];
  const meta = object.metadata || {};
  const anchored = (pattern, value) => new RegExp(`^(?:${pattern})$`).test(value || '');
  for (const field of Object.keys(target)) {
    if (!['group', 'version', 'kind', 'name', 'namespace'].includes(field)) {
      fail(`patch target field "${field}" is not supported by the renderer`);
    }
  }
  return (target.group === undefined || target.group === group) &&
    (target.version === undefined || target.version === version) &&
    (target.kind === undefined || target.kind === object.kind) &&
    (target.name === undefined || anchored(target.name, meta.name)) &&
    (target.namespace === undefined || target.namespace === meta.namespace);
}

function applyPatches(dir, kustomization, file, records) {
  for (const entry of kustomization.patches || []) {
    if (!isObject(entry) || (entry.path === undefined) === (entry.patch === undefined)) {
      fail(`${file}: each patch needs exactly one of path and patch`);
    }
    const where = entry.path ? `${file}: patch ${entry.path}` : `${file}: inline patch`;
    if (entry.path && !fs.existsSync(path.resolve(dir, entry.path))) fail(`${where}: no such file`);
    const text = entry.path ? fs.readFileSync(path.resolve(dir, entry.path), 'utf8') : entry.patch;
    let patch;
    try {
      patch = YAML.parse(text);
    } catch (error) {
      fail(`${where}: YAML error: ${error.message}`);
    }
    if (isObject(patch) && (!patch.apiVersion || !patch.kind || !patch.metadata || !patch.metadata.name)) {
      fail(`${where}: a strategic merge patch needs apiVersion, kind and metadata.name`);
    }
    let target = entry.target;
    if (!target) {
      if (!isObject(patch)) fail(`${where}: a JSON 6902 patch (a list of operations) needs a target`);
      target = { kind: patch.kind, name: patch.metadata.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') };
      if (patch.metadata.namespace) target.namespace = patch.metadata.namespace;
    }
    const matched = records.filter((record) => matchesTarget(record.object, target));
    if (matched.length === 0) fail(`${where}: matches no resource (target ${JSON.stringify(target)})`);
    for (const record of matched) {
      if (Array.isArray(patch)) {
        const patched = clone(record.object);
        try {
          applyJsonPatch(patched, patch);
        } catch (error) {
          fail(`${where} on ${idOf(record.object)}: ${error.message}`);
        }
        record.object = patched;
      } else if (isObject(patch)) {
        const body = clone(patch);
        // The patch's identity selects the target (or the target does); it renames nothing.
        delete body.metadata.name;
        record.object = strategicMerge(record.object, body);
      } else {
        fail(`${where}: a patch is a mapping (strategic merge) or a list (JSON 6902)`);
      }
    }
  }
}

// ---- namespace and images -------------------------------------------------------------------

function setNamespace(records, namespace) {
  for (const { object } of records) {
    if (!CLUSTER_SCOPED_KINDS.has(object.kind)) object.metadata.namespace = namespace;
  }
}

function splitImage(image) {
  const at = image.indexOf('@');
  const digest = at >= 0 ? image.slice(at + 1) : undefined;
  const rest = at >= 0 ? image.slice(0, at) : image;
  const colon = rest.lastIndexOf(':');
  const hasTag = colon > rest.lastIndexOf('/');
  return { name: hasTag ? rest.slice(0, colon) : rest, tag: hasTag ? rest.slice(colon + 1) : undefined, digest };
}

function forEachContainer(node, visit) {
  if (Array.isArray(node)) {
    node.forEach((item) => forEachContainer(item, visit));
  } else if (isObject(node)) {
    for (const [key, value] of Object.entries(node)) {
      if (CONTAINER_LISTS.has(key) && Array.isArray(value)) value.forEach(visit);
      else forEachContainer(value, visit);
    }
  }
}

function setImages(records, images, file) {
  for (const rule of images) {
    if (!rule.name) fail(`${file}: every images entry needs a name`);
    for (const { object } of records) {
      forEachContainer(object, (container) => {
        if (typeof container.image !== 'string') return;
        const current = splitImage(container.image);
        if (current.name !== rule.name) return;
        const name = rule.newName || current.name;
        if (rule.digest) {
          container.image = `${name}@${rule.digest}`;
        } else {
          const tag = rule.newTag !== undefined ? String(rule.newTag) : current.tag;
          container.image = name + (tag ? `:${tag}` : '') + (current.digest && !rule.newTag ? `@${current.digest}` : '');
        }
      });
    }
  }
}

// ---- build ----------------------------------------------------------------------------------

function build(dir) {
  const { file, kustomization } = readKustomization(dir);
  const records = loadResources(dir, kustomization, file);
  if (kustomization.namespace) setNamespace(records, kustomization.namespace);
  applyPatches(dir, kustomization, file, records);
  if (kustomization.images) setImages(records, kustomization.images, file);
  return records;
}

module.exports = { build, KustomizeError, strategicMerge, applyJsonPatch };
