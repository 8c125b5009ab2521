'use strict';
// Validates Kubernetes objects offline against the API's schemas, in two passes that use the
// same generated models (kubernetes-models: the Kubernetes OpenAPI spec, Kubernetes 1.32;
// @kubernetes-models/prometheus-operator: the PodMonitor/ServiceMonitor/... CRDs):
//
//  1. the JSON-schema validators (ajv) the models ship: types, formats (int32, quantities),
//     required fields, enums;
//  2. a TypeScript type check of each object against the model's interface, which rejects
//     unknown fields (a misspelt field is silently dropped by the API server's decoder, and
//     the OpenAPI schemas do not forbid extra properties) and wrong types at any depth.
//
// An object whose apiVersion/kind no installed package describes is an error: every manifest is
// validated, none skipped.

const path = require('path');
const ts = require('typescript');

const CHECK_DIR = path.resolve(__dirname, '..');
// Packages whose layout is <package>/<group>/<version>/<Kind> (core: <package>/v1/<Kind>).
const MODEL_PACKAGES = ['kubernetes-models', '@kubernetes-models/prometheus-operator'];

function findModel(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z0-9]+$/.test(kind)) {
    return null;
  }
  for (const pkg of MODEL_PACKAGES) {
    const modulePath = `${pkg}/${apiVersion}/${kind}`;
    let resolved;
    try {
      resolved = require.resolve(modulePath, { paths: [CHECK_DIR] });
    } catch (error) {
      continue;
    }
    const Model = require(resolved)[kind];
    if (typeof Model === 'function' && Model.apiVersion === apiVersion && Model.kind === kind) {
      return { modulePath, Model, typeName: `I${kind}` };
    }
  }
  return null;
}

function describe(record) {
  const meta = record.object.metadata || {};
  return `${record.object.kind} ${meta.namespace ? meta.namespace + '/' : ''}${meta.name} (${record.source})`;
}

// Pass 1: returns [{ record, message }].
function validateWithSchemas(records) {
  const errors = [];
  for (const record of records) {
    const { apiVersion, kind } = record.object;
    const model = findModel(apiVersion, kind);
    if (!model) {
      errors.push({ record, message: `no schema for apiVersion ${apiVersion}, kind ${kind}: ` +
        `add its models package to deploy/check (MODEL_PACKAGES in lib/schema.js)` });
      continue;
    }
    try {
      new model.Model(JSON.parse(JSON.stringify(record.object))).validate();
    } catch (error) {
      errors.push({ record, message: `schema: ${error.message.replace(/\s+/g, ' ')}` });
    }
  }
  return errors;
}

// Pass 2: type-checks every set at once (one TypeScript program: the models' declarations are
// parsed once). `sets` is [{ name, records }]; returns Map(name -> [{ record, message }]).
function typeCheck(sets) {
  const files = new Map();
  for (const [index, set] of sets.entries()) {
    const fileName = path.join(CHECK_DIR, `.virtual-${index}.ts`);
    const imports = new Map();
    const lines = [];
    const spans = [];
    set.records.forEach((record, i) => {
      const model = findModel(record.object.apiVersion, record.object.kind);
      if (!model) return;  // reported by validateWithSchemas
      const alias = `T${imports.size}`;
      if (!imports.has(model.modulePath)) imports.set(model.modulePath, { alias, typeName: model.typeName });
      const { alias: typeAlias } = imports.get(model.modulePath);
      const body = JSON.stringify(record.object, null, 2).split('\n');
      spans.push({ first: lines.length, last: lines.length + body.length, record });
      body[0] = `export const object${i}: ${typeAlias} = ${body[0]}`;
      body[body.length - 1] += ';';
      lines.push(...body);
    });
    const header = [...imports].map(([modulePath, { alias, typeName }]) =>
      `import type { ${typeName} as ${alias} } from ${JSON.stringify(modulePath)};`);
    const offset = header.length;
    for (const span of spans) { span.first += offset; span.last += offset; }
    const text = [...header, ...lines].join('\n') + '\n';
    files.set(fileName, { set, text, spans, lines: text.split('\n') });
  }

  const options = {
    strict: true, noEmit: true, skipLibCheck: true, types: [], target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.CommonJS, moduleResolution: ts.ModuleResolutionKind.Node10,
    lib: ['lib.es2020.d.ts'],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.fileExists = (f) => files.has(path.resolve(f)) || fileExists.call(host, f);
  host.readFile = (f) => (files.has(path.resolve(f)) ? files.get(path.resolve(f)).text : readFile.call(host, f));
  host.getSourceFile = (f, languageVersion, ...rest) => (files.has(path.resolve(f))
    ? ts.createSourceFile(f, files.get(path.resolve(f)).text, languageVersion, true)
    : getSourceFile.call(host, f, languageVersion, ...rest));
  const program = ts.createProgram([...files.keys()], options, host);

  const results = new Map(sets.map((set) => [set.name, []]));
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const file = diagnostic.file && files.get(path.resolve(diagnostic.file.fileName));
    const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n').split('\n')[0];
    const message = `fields: ${text.length > 300 ? text.slice(0, 300) + '…' : text}`;
    if (!file) {
      // An error outside our generated code (a broken models package) fails every set.
      for (const errors of results.values()) errors.push({ record: null, message });
      continue;
    }
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    const span = file.spans.find((s) => line >= s.first && line < s.last);
    const near = file.lines[line].trim();
    results.get(file.set.name).push({
      record: span ? span.record : null,
      message: `${message} (at ${near.length > 120 ? near.slice(0, 120) + '…' : near})`,
    });
  }
  return results;
}

module.exports = { validateWithSchemas, typeCheck, describe, findModel };
