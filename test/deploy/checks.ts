// The checks behind test/deploy/deploy-files.test.ts, one function per kind
// of file in deploy/. Each returns the problems it found, one line each (an
// empty list: the file passes), so the tests can run it on the real file and
// on a broken copy alike.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { parser as promqlParser } from '@prometheus-io/lezer-promql';
import { ValidationSeverity, validate as validateDockerfile } from 'dockerfile-utils';
import jsonpatch, { type Operation } from 'fast-json-patch';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';

import { toolPath } from '../helpers/tools.js';

/** The checkout, seen from dist/test/deploy. */
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const DEPLOY = join(ROOT, 'deploy');

// ---------------------------------------------------------------- tools

function run(command: string, args: string[]): { code: number | null; output: string } {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error) throw result.error;
  return { code: result.status, output: `${result.stdout}${result.stderr}` };
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'rkv-deploy-'));
}

/** Runs fn with a fresh temp directory, removed afterwards. */
export function inTempDir<T>(fn: (dir: string) => T): T {
  const dir = tempDir();
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every file under a directory, as paths relative to it. */
export function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => statSync(join(dir, name)).isFile())
    .sort();
}

// ---------------------------------------------------------------- kv-server's options

let options: Set<string> | undefined;

/** kv-server's option names, from its --help (aliases included). */
export function kvServerOptions(): Set<string> {
  if (!options) {
    const { code, output } = run(process.execPath, [join(ROOT, 'bin/kv-server.js'), '--help']);
    if (code !== 0) throw new Error(`kv-server --help exited ${code}: ${output}`);
    options = new Set([...output.matchAll(/^\s+(?:-(\w), )?--([a-z][a-z0-9-]*)/gm)].flatMap((m) => (m[1] ? [m[1], m[2]!] : [m[2]!])));
  }
  return options;
}

/** The options in a kv-server command line that kv-server does not have. */
export function unknownOptions(args: string[], where: string): string[] {
  const known = kvServerOptions();
  return args
    .map((arg) => /^--?([A-Za-z][\w-]*)/.exec(arg)?.[1])
    .filter((name): name is string => name !== undefined && !known.has(name))
    .map((name) => `${where}: kv-server has no option --${name}`);
}

// ---------------------------------------------------------------- systemd

/** The unit's [Service] settings, in order (a key may repeat). */
export function unitSettings(text: string): Array<[string, string]> {
  return text
    .split('\n')
    .filter((line) => /^[A-Za-z]+=/.test(line))
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]);
}

/**
 * kv-server's arguments as systemd would pass them: ExecStart after the
 * program, with $NAME replaced by the words of Environment="NAME=..."
 * (systemd splits an unbraced $NAME on whitespace) and ${NAME} by `vars`.
 */
export function execStartArgs(text: string, vars: Record<string, string> = {}): string[] {
  const settings = unitSettings(text);
  const env = new Map<string, string>();
  for (const [key, value] of settings) {
    if (key !== 'Environment') continue;
    const assignment = value.replace(/^"(.*)"$/, '$1');
    env.set(assignment.slice(0, assignment.indexOf('=')), assignment.slice(assignment.indexOf('=') + 1));
  }
  const execStart = settings.find(([key]) => key === 'ExecStart')?.[1];
  if (execStart === undefined) throw new Error('the unit has no ExecStart=');
  return execStart
    .split(/\s+/)
    .slice(1)
    .flatMap((word) => (/^\$\w+$/.test(word) ? (env.get(word.slice(1)) ?? '').split(/\s+/).filter(Boolean) : [word]))
    .map((word) => word.replace(/\$\{(\w+)\}/g, (whole, name: string) => vars[name] ?? whole));
}

/**
 * `systemd-analyze verify` on the unit text. It exits 0 on unknown keys and
 * unparseable values, warning only, so any line it prints about the unit is
 * a problem too. It needs no running systemd (it loads units itself, the
 * same in a container); --man=no because a container has no man pages to
 * check Documentation= against. It checks that ExecStart's program exists
 * and is executable: the caller passes a copy whose program is a real file.
 */
export function verifyUnit(text: string, name = 'kv-server.service'): string[] {
  return inTempDir((dir) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    const { code, output } = run(toolPath('systemd-analyze'), ['verify', '--man=no', path]);
    const lines = output.split('\n').filter((line) => line.includes(name));
    if (code !== 0 && lines.length === 0) lines.push(`systemd-analyze verify exited ${code}: ${output.trim()}`);
    return lines;
  });
}

/** systemd-sysusers on the file, into an empty root: the users and groups it creates, or its errors. */
export function applySysusers(text: string): { problems: string[]; passwd: string } {
  return inTempDir((root) => {
    const path = join(root, 'rdma-kv.conf');
    writeFileSync(path, text);
    mkdirSync(join(root, 'etc'));
    const { code, output } = run(toolPath('systemd-sysusers'), [`--root=${root}`, path]);
    const passwd = existsSync(join(root, 'etc/passwd')) ? readFileSync(join(root, 'etc/passwd'), 'utf8') : '';
    return { problems: code === 0 ? [] : [`systemd-sysusers exited ${code}: ${output.trim()}`], passwd };
  });
}

// ---------------------------------------------------------------- container

/** dockerfile-utils' validator (the VS Code Docker extension's), every rule an error. */
export function lintDockerfile(text: string): string[] {
  const error = ValidationSeverity.ERROR;
  const settings = {
    deprecatedMaintainer: error, directiveCasing: error, emptyContinuationLine: error, instructionCasing: error,
    instructionCmdMultiple: error, instructionEntrypointMultiple: error, instructionHealthcheckMultiple: error,
    instructionJSONInSingleQuotes: error, instructionWorkdirRelative: error,
  };
  return validateDockerfile(text, settings).map((d) => `line ${d.range.start.line + 1}: ${d.message}`);
}

/** The instructions of the Dockerfile's last stage, continuation lines joined. */
export function finalStage(text: string): Array<{ keyword: string; args: string }> {
  const instructions = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trimStart().startsWith('#'))
    .map((line) => {
      const [, keyword = '', args = ''] = /^\s*(\S+)\s*(.*)$/.exec(line) ?? [];
      return { keyword: keyword.toUpperCase(), args };
    });
  const from = instructions.map((i) => i.keyword).lastIndexOf('FROM');
  return instructions.slice(from);
}

/** What the issue asks of the image: it runs as a non-root user, with IPC_LOCK, kv-server by default. */
export function imagePolicy(text: string): string[] {
  const stage = finalStage(text);
  const problems: string[] = [];
  const user = stage.filter((i) => i.keyword === 'USER').at(-1)?.args;
  if (user === undefined) problems.push('the final stage sets no USER: the image would run as root');
  else if (/^(root|0)(:|$)/.test(user)) problems.push(`the final stage runs as ${user}`);
  if (!stage.some((i) => i.keyword === 'RUN' && /setcap cap_ipc_lock=ep /.test(i.args))) {
    problems.push('the final stage gives node no IPC_LOCK file capability: a non-root kv-server could not pin its region');
  }
  const entrypoint = stage.find((i) => i.keyword === 'ENTRYPOINT')?.args;
  if (entrypoint !== '["kv-server"]') problems.push(`ENTRYPOINT is ${entrypoint}, not ["kv-server"]`);
  const cmd = stage.find((i) => i.keyword === 'CMD')?.args;
  problems.push(...unknownOptions(cmd ? (JSON.parse(cmd) as string[]) : [], 'CMD'));
  return problems;
}

// ---------------------------------------------------------------- shell

/** The shell scripts under a directory: *.sh, or a shell in the #! line. */
export function shellScripts(dir: string): string[] {
  return filesUnder(dir).filter((name) => {
    if (name.endsWith('.sh')) return true;
    const first = readFileSync(join(dir, name), 'utf8').split('\n', 1)[0]!;
    return /^#!.*\b(ba|da|a)?sh\b/.test(first);
  });
}

export function shellcheck(path: string): string[] {
  const { code, output } = run(toolPath('shellcheck'), ['--format=gcc', path]);
  if (code === 0) return [];
  return output.trim() ? output.trim().split('\n') : [`shellcheck exited ${code}`];
}

// ---------------------------------------------------------------- Kubernetes

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  // Read loosely by crossReferences; the schemas and the type check judge it.
  spec?: Record<string, any>;
  [key: string]: unknown;
}

export interface Manifest {
  /** The file it came from, relative to the k8s directory. */
  file: string;
  object: K8sObject;
}

export const label = (m: Manifest) => `${m.file}: ${m.object.kind}/${m.object.metadata?.name ?? '?'}`;

/**
 * YAML 1.1, as kubectl reads it (sigs.k8s.io/yaml): 0440 is octal and yes is
 * true. YAML 1.2, the yaml package's default, would read 0440 as 440.
 */
export function readManifests(dir: string, file: string): Manifest[] {
  const docs = parseAllDocuments(readFileSync(join(dir, file), 'utf8'), { version: '1.1', uniqueKeys: true });
  return docs.map((doc, i) => {
    if (doc.errors.length > 0) throw new Error(`${file}: document ${i + 1}: ${doc.errors[0]!.message.split('\n')[0]}`);
    const object = doc.toJS() as K8sObject;
    if (!object || typeof object.apiVersion !== 'string' || typeof object.kind !== 'string') {
      throw new Error(`${file}: document ${i + 1} has no apiVersion and kind`);
    }
    return { file, object };
  });
}

const KUSTOMIZATION_FIELDS = new Set(['apiVersion', 'kind', 'resources', 'patches']);

/**
 * What `kubectl apply -k DIR` would send, for the part of kustomize these
 * kustomizations use: resources (files and directories) and JSON 6902
 * patches with a target, applied with an RFC 6902 library as kustomize does.
 * Anything else in a kustomization.yaml is refused, not ignored.
 */
export function renderKustomization(root: string, dir: string): Manifest[] {
  const file = join(dir, 'kustomization.yaml');
  const k = readManifests(root, relative(root, file))[0]!.object as unknown as {
    resources?: string[];
    patches?: Array<{ path?: string; target?: Record<string, string> }>;
  };
  const extra = Object.keys(k).filter((key) => !KUSTOMIZATION_FIELDS.has(key));
  if (extra.length > 0) throw new Error(`${relative(root, file)}: this check renders only resources and patches, not ${extra.join(', ')}`);
  const manifests: Manifest[] = [];
  for (const resource of k.resources ?? []) {
    const path = resolve(dir, resource);
    if (statSync(path).isDirectory()) manifests.push(...renderKustomization(root, path));
    else manifests.push(...readManifests(root, relative(root, path)));
  }
  for (const patch of k.patches ?? []) {
    const target = patch.target ?? {};
    if (!patch.path || !target.kind) throw new Error(`${relative(root, file)}: a patch needs a path and a target kind`);
    const patchFile = relative(root, resolve(dir, patch.path));
    const ops = parseAllDocuments(readFileSync(join(root, patchFile), 'utf8'), { version: '1.1' })[0]!.toJS() as Operation[];
    if (!Array.isArray(ops)) throw new Error(`${patchFile}: not a JSON 6902 patch (a list of operations)`);
    const matches = manifests.filter(({ object }) => {
      const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : ['', object.apiVersion];
      return object.kind === target.kind && (target.name === undefined || object.metadata?.name === target.name) &&
        (target.group === undefined || target.group === group) && (target.version === undefined || target.version === version);
    });
    if (matches.length === 0) throw new Error(`${patchFile}: its target ${JSON.stringify(target)} matches nothing`);
    for (const match of matches) {
      try {
        match.object = jsonpatch.applyPatch(structuredClone(match.object), ops, true).newDocument;
      } catch (error) {
        throw new Error(`${patchFile} on ${label(match)}: ${(error as Error).message.split('\n')[0]}`);
      }
    }
  }
  return manifests;
}

/** Where the model of an apiVersion/kind lives: the Kubernetes API's, or the Prometheus Operator's CRDs. */
function modelModule({ apiVersion, kind }: K8sObject): string {
  if (apiVersion === 'monitoring.coreos.com/v1') return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  return `kubernetes-models/${apiVersion}/${kind}`;
}

type ModelClass = new (data: unknown) => { validate(): void };

/** The kubernetes-models class of the object's apiVersion/kind, if there is one. */
async function loadModel(object: K8sObject): Promise<ModelClass | undefined> {
  try {
    return ((await import(modelModule(object))) as Record<string, ModelClass>)[object.kind];
  } catch {
    return undefined;
  }
}

/**
 * Validation against the JSON schemas kubernetes-models generates from
 * Kubernetes' OpenAPI definitions (types, required fields, enums, formats),
 * and from the Prometheus Operator's CRDs for ServiceMonitor. An
 * apiVersion/kind without a model is a problem too.
 */
export async function schemaProblems(manifests: Manifest[]): Promise<string[]> {
  const problems: string[] = [];
  for (const m of manifests) {
    const Model = await loadModel(m.object);
    if (!Model) {
      problems.push(`${label(m)}: no schema for ${m.object.apiVersion} ${m.object.kind} (a typo, or a kind this check does not know)`);
      continue;
    }
    try {
      new Model(m.object).validate();
    } catch (error) {
      problems.push(`${label(m)}: ${(error as Error).message}`);
    }
  }
  return problems;
}

/** The property path (spec.template.spec.containers[0].resource) of a node in a generated object literal. */
function literalPath(node: ts.Node): string {
  const parts: string[] = [];
  for (let n: ts.Node = node; n.parent && !ts.isVariableDeclaration(n); n = n.parent) {
    if (ts.isPropertyAssignment(n)) parts.unshift(`.${(n.name as ts.StringLiteral).text}`);
    else if (ts.isArrayLiteralExpression(n.parent)) parts.unshift(`[${n.parent.elements.indexOf(n as ts.Expression)}]`);
  }
  return parts.join('').replace(/^\./, '');
}

function nodeAt(file: ts.SourceFile, position: number): ts.Node {
  let found: ts.Node = file;
  const visit = (node: ts.Node) => {
    if (node.getStart(file) <= position && position < node.getEnd()) {
      found = node;
      ts.forEachChild(node, visit);
    }
  };
  ts.forEachChild(file, visit);
  return found;
}

/**
 * Fields the API does not have. Kubernetes' schemas allow unknown fields, so
 * schema validation lets a typo (`resource:` for `resources:`) through; the
 * API server would drop it, or refuse it with strict field validation. Each
 * object is type-checked as an object literal of its kubernetes-models
 * interface, and TypeScript's excess property check names every field the
 * interface lacks.
 */
export function unknownFields(manifests: Manifest[]): string[] {
  const fileName = join(ROOT, 'test/deploy/__manifests__.mts');
  const source = manifests
    .map((m, i) => `import type { I${m.object.kind} as T${i} } from '${modelModule(m.object)}';\nexport const o${i}: T${i} = ${JSON.stringify(m.object, null, 1)};`)
    .join('\n');
  const options: ts.CompilerOptions = {
    strict: true, noEmit: true, skipLibCheck: true, types: [],
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
  };
  const host = ts.createCompilerHost(options);
  const generated = ts.createSourceFile(fileName, source, ts.ScriptTarget.ES2022, true);
  const { getSourceFile, fileExists } = host;
  host.getSourceFile = (name, ...rest) => (resolve(name) === fileName ? generated : getSourceFile.call(host, name, ...rest));
  host.fileExists = (name) => resolve(name) === fileName || fileExists.call(host, name);
  const program = ts.createProgram([fileName], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const text = ts.flattenDiagnosticMessageText(d.messageText, '\n').split('\n')[0]!;
    if (d.file !== generated || d.start === undefined) return `type check: ${text}`;
    const node = nodeAt(generated, d.start);
    let declaration: ts.Node | undefined = node;
    while (declaration && !ts.isVariableDeclaration(declaration)) declaration = declaration.parent;
    if (!declaration) return `type check: ${text}`;
    const index = Number((declaration as ts.VariableDeclaration).name.getText(generated).slice(1));
    const where = `${label(manifests[index]!)}: ${literalPath(node)}`;
    const unknown = /known properties, and '"?([^'"]+)"?' does not exist in type '(\w*)/.exec(text);
    return unknown ? `${where}: unknown field${unknown[2] ? ` (not in ${unknown[2]})` : ''}` : `${where}: ${text.slice(0, 300)}`;
  });
}

const WORKLOADS = new Set(['StatefulSet', 'Deployment', 'DaemonSet']);

function matches(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  return selector !== undefined && Object.entries(selector).every(([k, v]) => labels?.[k] === v);
}

/**
 * What neither the schemas nor the API server check, but breaks the
 * deployment: selectors that select nothing, a StatefulSet without its
 * headless Service, mounts of volumes that do not exist, $(VARS) that are
 * not defined, probes on ports the container does not have, kv-server
 * options kv-server does not have.
 */
export function crossReferences(manifests: Manifest[]): string[] {
  const problems: string[] = [];
  const ns = (m: Manifest) => m.object.metadata?.namespace ?? 'default';
  const workloads = manifests.filter((m) => WORKLOADS.has(m.object.kind));
  const podsMatch = (m: Manifest, selector: Record<string, string> | undefined) =>
    workloads.some((w) => ns(w) === ns(m) && matches(selector, w.object.spec?.template?.metadata?.labels));
  const services = manifests.filter((m) => m.object.kind === 'Service');
  for (const m of manifests) {
    const spec = m.object.spec ?? {};
    switch (m.object.kind) {
      case 'Service':
        if (spec.selector && !podsMatch(m, spec.selector)) problems.push(`${label(m)}: its selector matches no pods`);
        break;
      case 'PodDisruptionBudget':
      case 'NetworkPolicy': {
        const selector = m.object.kind === 'PodDisruptionBudget' ? spec.selector?.matchLabels : spec.podSelector?.matchLabels;
        if (!podsMatch(m, selector)) problems.push(`${label(m)}: its selector matches no pods`);
        break;
      }
      case 'ServiceMonitor': {
        const selected = services.filter((s) => ns(s) === ns(m) && matches(spec.selector?.matchLabels, s.object.metadata?.labels));
        if (selected.length === 0) problems.push(`${label(m)}: its selector matches no Service`);
        for (const endpoint of spec.endpoints ?? []) {
          if (selected.length > 0 && !selected.some((s) => s.object.spec?.ports?.some((p: { name?: string }) => p.name === endpoint.port))) {
            problems.push(`${label(m)}: the selected Service has no port named ${endpoint.port}`);
          }
        }
        break;
      }
    }
    if (!WORKLOADS.has(m.object.kind)) continue;
    if (!matches(spec.selector?.matchLabels, spec.template?.metadata?.labels)) problems.push(`${label(m)}: the selector does not match the pod template's labels`);
    if (m.object.kind === 'StatefulSet') {
      const headless = services.find((s) => ns(s) === ns(m) && s.object.metadata?.name === spec.serviceName);
      if (headless?.object.spec?.clusterIP !== 'None') problems.push(`${label(m)}: serviceName ${spec.serviceName} is not a headless Service here`);
    }
    const pod = spec.template?.spec ?? {};
    const volumes = new Set<string>([
      ...(pod.volumes ?? []).map((v: { name: string }) => v.name),
      ...(spec.volumeClaimTemplates ?? []).map((v: { metadata: { name: string } }) => v.metadata.name),
    ]);
    for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
      const where = `${label(m)}: container ${c.name}`;
      for (const mount of c.volumeMounts ?? []) if (!volumes.has(mount.name)) problems.push(`${where}: mounts volume ${mount.name}, which the pod does not have`);
      const env = new Set((c.env ?? []).map((e: { name: string }) => e.name));
      for (const arg of [...(c.command ?? []), ...(c.args ?? [])] as string[]) {
        for (const [, name] of arg.matchAll(/\$\((\w+)\)/g)) if (!env.has(name)) problems.push(`${where}: $(${name}) is not in its env`);
      }
      const ports = new Set((c.ports ?? []).map((p: { name?: string }) => p.name));
      for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
        const port = c[probe]?.httpGet?.port ?? c[probe]?.tcpSocket?.port;
        if (typeof port === 'string' && !ports.has(port)) problems.push(`${where}: ${probe} uses port ${port}, which it does not declare`);
      }
      if (c.name === 'kv-server') problems.push(...unknownOptions(c.args ?? [], where));
    }
  }
  return problems;
}

/**
 * Every check for a deploy/k8s tree: what each kustomization renders, and
 * the plain manifests beside them (applied with kubectl apply -f, so they are
 * cross-checked with each rendering). Every YAML file must be reached.
 */
export async function k8sProblems(root: string): Promise<{ problems: string[]; objects: number }> {
  const problems: string[] = [];
  const files = filesUnder(root).filter((f) => f.endsWith('.yaml') || f.endsWith('.yml'));
  const kustomizations = files.filter((f) => f.endsWith('kustomization.yaml'));
  // Files a kustomization names, known before rendering, so one that fails
  // to render does not make its patches look like stray manifests.
  const used = new Set<string>(kustomizations);
  for (const k of kustomizations) {
    const { resources = [], patches = [] } = (parseAllDocuments(readFileSync(join(root, k), 'utf8'))[0]?.toJS() ?? {}) as {
      resources?: string[];
      patches?: Array<{ path?: string }>;
    };
    for (const path of [...resources, ...patches.map((p) => p.path ?? '')]) used.add(relative(root, resolve(root, dirname(k), path)));
  }
  const renders: Manifest[][] = [];
  for (const k of kustomizations) {
    try {
      renders.push(renderKustomization(root, join(root, dirname(k))));
    } catch (error) {
      problems.push((error as Error).message);
    }
  }
  const standalone: Manifest[] = [];
  for (const f of files.filter((f) => !used.has(f))) {
    try {
      standalone.push(...readManifests(root, f));
    } catch (error) {
      problems.push((error as Error).message);
    }
  }
  // The schemas and the type check once per distinct object; references per rendering.
  const distinct = new Map<string, Manifest>();
  for (const m of [...renders.flat(), ...standalone]) distinct.set(JSON.stringify(m), m);
  const modeled: Manifest[] = [];
  for (const m of distinct.values()) if (await loadModel(m.object)) modeled.push(m);
  problems.push(...(await schemaProblems([...distinct.values()])), ...unknownFields(modeled));
  for (const render of renders.length > 0 ? renders : [[]]) problems.push(...crossReferences([...render, ...standalone]));
  return { problems: [...new Set(problems)], objects: distinct.size };
}

// ---------------------------------------------------------------- Grafana

/** Grafana's own variables, replaced by something PromQL parses before parsing. */
const GRAFANA_BUILTINS: Record<string, string> = { __rate_interval: '5m', __interval: '1m', __range: '1h' };

/** The metric names a PromQL expression selects, or a syntax error. */
export function promqlMetrics(expr: string): { names: string[]; error?: string } {
  const tree = promqlParser.parse(expr);
  const names: string[] = [];
  let error: string | undefined;
  tree.iterate({
    enter(node) {
      if (node.type.isError && error === undefined) error = `syntax error at ${node.from}: ${JSON.stringify(expr.slice(node.from, node.from + 30))}`;
      if (node.name === 'VectorSelector') {
        const id = node.node.getChild('Identifier');
        if (id) names.push(expr.slice(id.from, id.to));
        else error ??= `a selector without a metric name: ${expr.slice(node.from, node.to)}`;
      }
    },
  });
  return error === undefined ? { names } : { names, error };
}

interface Panel {
  id?: number;
  type?: string;
  title?: string;
  datasource?: { uid?: string };
  targets?: Array<{ expr?: string; refId?: string }>;
  panels?: Panel[];
}

/**
 * The dashboard parses, its panels have unique ids and use the datasource
 * variable, every query is PromQL, every variable it uses is defined, and
 * every metric it queries is one `known` names (what the code exports). It
 * also charts every name in `mustChart`.
 */
export function dashboardProblems(text: string, known: Set<string>, mustChart: string[]): string[] {
  const problems: string[] = [];
  let dashboard: { panels?: Panel[]; templating?: { list?: Array<{ name: string; type: string; query?: unknown }> } };
  try {
    dashboard = JSON.parse(text) as typeof dashboard;
  } catch (error) {
    return [`not JSON: ${(error as Error).message}`];
  }
  const variables = dashboard.templating?.list ?? [];
  const defined = new Set([...variables.map((v) => v.name), ...Object.keys(GRAFANA_BUILTINS)]);
  const queries: Array<{ where: string; expr: string }> = [];
  for (const v of variables) {
    if (v.type !== 'query') continue;
    const query = typeof v.query === 'string' ? v.query : (v.query as { query?: string }).query ?? '';
    const series = /^label_values\((.+),\s*\w+\)$/.exec(query)?.[1];
    if (series === undefined) problems.push(`variable ${v.name}: expected label_values(series, label), got ${query}`);
    else queries.push({ where: `variable ${v.name}`, expr: series });
  }
  const panels = (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]);
  if (panels.length === 0) problems.push('no panels');
  const ids = new Set<number>();
  for (const p of panels) {
    const where = `panel ${p.id} "${p.title}"`;
    if (typeof p.id !== 'number' || ids.has(p.id)) problems.push(`${where}: missing or repeated id`);
    ids.add(p.id!);
    if (p.type === 'row') continue;
    if (p.datasource?.uid !== '${datasource}') problems.push(`${where}: does not use the datasource variable`);
    if (!p.targets?.length) problems.push(`${where}: no queries`);
    for (const target of p.targets ?? []) queries.push({ where: `${where} query ${target.refId}`, expr: target.expr ?? '' });
  }
  const charted = new Set<string>();
  for (const { where, expr } of queries) {
    for (const [, name] of expr.matchAll(/\$\{?(\w+)/g)) if (!defined.has(name!)) problems.push(`${where}: $${name} is not a dashboard variable`);
    const substituted = expr.replace(/\$\{?(\w+)\}?/g, (_, name: string) => GRAFANA_BUILTINS[name] ?? name);
    const { names, error } = promqlMetrics(substituted);
    if (error) problems.push(`${where}: ${error}`);
    for (const name of names) {
      charted.add(name);
      if (!known.has(name)) problems.push(`${where}: ${name} is not a metric the code exports`);
    }
  }
  for (const name of mustChart) {
    const histogram = [`${name}_bucket`, `${name}_sum`, `${name}_count`];
    if (!charted.has(name) && !histogram.some((n) => charted.has(n))) problems.push(`${name} is on no panel`);
  }
  return problems;
}
