'use strict';
// Lints a Dockerfile offline: the syntax and instruction checks of dockerfile-utils (the
// validator behind VS Code's Docker support: unknown instructions and flags, bad arguments,
// ports, stage names, JSON forms, ...), warnings included, plus rules for these images:
//   * every FROM is an earlier stage or an image with an explicit tag or digest (not latest),
//     after substituting the global ARG defaults;
//   * COPY --from names an earlier stage; every other COPY/ADD source exists in the build
//     context, which is the repository root;
//   * apt-get install runs with -y and --no-install-recommends, and the same RUN removes
//     /var/lib/apt/lists;
//   * the final stage runs as a non-root USER, with an exec-form (JSON) ENTRYPOINT.
// lint(file, contextDir) returns [messages], each prefixed with file:line.

const fs = require('fs');
const path = require('path');
const { DockerfileParser } = require('dockerfile-ast');
const dockerfileUtils = require('dockerfile-utils');

function substitute(text, variables) {
  return text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (whole, braced, bare) => {
      const name = braced || bare;
      return variables.has(name) ? variables.get(name) : whole;
    });
}

function imageIsPinned(image) {
  if (/@sha256:[0-9a-f]{64}$/.test(image)) return true;
  const last = image.slice(image.lastIndexOf('/') + 1);
  const tag = last.includes(':') ? last.split(':').pop() : '';
  return tag !== '' && tag !== 'latest' && !tag.includes('$');
}

function lint(file, contextDir) {
  const text = fs.readFileSync(file, 'utf8');
  const name = path.relative(process.cwd(), file);
  const errors = [];
  const at = (line, message) => errors.push(`${name}:${line + 1}: ${message}`);

  for (const d of dockerfileUtils.validate(text)) {
    at(d.range.start.line, `${d.severity === 1 ? 'error' : 'warning'}: ${d.message}`);
  }

  const dockerfile = DockerfileParser.parse(text);
  const globals = new Map();
  for (const arg of dockerfile.getInitialARGs()) {
    const property = arg.getProperty();
    if (property && property.getValue() !== null) globals.set(property.getName(), property.getValue());
  }

  const stages = [];  // [{ name, line }] of the named stages
  const isStageBefore = (name, line) => stages.some((s) => s.name === name && s.line < line);
  const froms = dockerfile.getFROMs();
  for (const from of froms) {
    const line = from.getRange().start.line;
    const image = substitute(from.getImage() || '', globals);
    if (!isStageBefore(image, line) && !imageIsPinned(image)) {
      at(line, `FROM ${from.getImage()} (= ${image}): use an earlier stage or an image with an explicit tag or digest`);
    }
    if (from.getBuildStage()) stages.push({ name: from.getBuildStage(), line });
  }

  for (const instruction of dockerfile.getInstructions()) {
    const keyword = instruction.getKeyword();
    const line = instruction.getRange().start.line;
    if (keyword === 'COPY' || keyword === 'ADD') {
      const fromFlag = keyword === 'COPY' ? instruction.getFromFlag() : null;
      const sources = instruction.getArguments().map((a) => a.getValue()).slice(0, -1);
      if (fromFlag) {
        const stage = fromFlag.getValue();
        if (!isStageBefore(stage, line) && !imageIsPinned(stage)) {
          at(line, `COPY --from=${stage}: no earlier stage has that name`);
        }
      } else {
        for (const source of sources) {
          if (/^https?:\/\//.test(source)) { at(line, `${keyword} ${source}: fetch with RUN instead`); continue; }
          if (/[*?[]/.test(source)) continue;
          if (!fs.existsSync(path.resolve(contextDir, source))) {
            at(line, `${keyword} ${source}: not in the build context (${path.relative(process.cwd(), contextDir) || '.'})`);
          }
        }
      }
    } else if (keyword === 'RUN') {
      const command = instruction.getArgumentsContent() || '';
      if (/apt-get\s+(?:-\S+\s+)*install/.test(command)) {
        if (!/--no-install-recommends/.test(command)) at(line, 'apt-get install without --no-install-recommends');
        if (!/(^|\s)(-y|--yes|-[a-z]*y[a-z]*)(\s|$)/.test(command)) at(line, 'apt-get install without -y');
        if (!/rm -rf \/var\/lib\/apt\/lists/.test(command)) {
          at(line, 'apt-get install without rm -rf /var/lib/apt/lists/* in the same RUN');
        }
      }
    }
  }

  const lastFrom = froms[froms.length - 1];
  if (lastFrom) {
    const finalStage = dockerfile.getInstructions().filter((i) => i.getRange().start.line > lastFrom.getRange().start.line);
    const users = finalStage.filter((i) => i.getKeyword() === 'USER');
    const user = users.length ? (users[users.length - 1].getArgumentsContent() || '').split(':')[0] : 'root';
    if (user === 'root' || user === '0') at(lastFrom.getRange().start.line, 'the final stage must switch to a non-root USER');
    const entrypoints = finalStage.filter((i) => i.getKeyword() === 'ENTRYPOINT');
    if (entrypoints.length === 0) {
      at(lastFrom.getRange().start.line, 'the final stage has no ENTRYPOINT');
    } else if (!/^\s*\[/.test(entrypoints[entrypoints.length - 1].getArgumentsContent() || '')) {
      at(entrypoints[entrypoints.length - 1].getRange().start.line, 'ENTRYPOINT must use the exec (JSON) form, so signals reach the binary');
    }
  }
  return errors;
}

module.exports = { lint };
