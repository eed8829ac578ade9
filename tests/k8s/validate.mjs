#!/usr/bin/env node
// tests/k8s/validate.mjs - validate Kubernetes manifests: the Kubernetes schemas
// (npm kubernetes-models 4.x) plus the invariants ringmaster relies on that the
// schemas cannot see.
//
//   node validate.mjs [--expect-world N] FILE|- [FILE|-]...
//
// Every YAML document of every input is checked against the schema of its
// apiVersion/kind; then, over all documents together (per namespace):
//   Job (ringmaster workers):
//     completionMode == Indexed; completions == parallelism; both == the
//     ringmaster.io/world-size label when present and == --expect-world N;
//     restartPolicy Never; spec.template.spec.subdomain names a headless
//     Service (clusterIP None) of the inputs, whose selector selects the
//     Job's pod labels; secretKeyRef names a Secret of the inputs when any
//     Secret is given.
//   Deployment: selector.matchLabels select the pod template labels; a
//     Deployment with a PersistentVolumeClaim volume has replicas 1 and
//     strategy Recreate (one SQLite writer); every claimName names a PVC of
//     the inputs; some Service selects its pods.
// Prints "ok KIND/NAME" per object, or every error, and exits 1 on any error.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

async function schemaErrors(obj) {
  const [group, version] = obj.apiVersion.includes("/")
    ? obj.apiVersion.split("/")
    : [null, obj.apiVersion];
  const modPath = group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`;
  let mod;
  try {
    mod = await import(modPath);
  } catch {
    return [`unknown apiVersion ${obj.apiVersion}`];
  }
  const Model = mod[obj.kind];
  if (typeof Model !== "function") return [`unknown kind ${obj.kind} in ${obj.apiVersion}`];
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    return [String(e.message || e)];
  }
}

const nsOf = (o) => (o.metadata && o.metadata.namespace) || "";
const idOf = (o) => `${o.kind}/${(o.metadata && o.metadata.name) || "?"}`;
const selects = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

function find(objs, kind, ns, name) {
  return objs.find((o) => o.kind === kind && nsOf(o) === ns && o.metadata.name === name);
}

function checkJob(job, objs, opts, err) {
  const s = job.spec || {};
  const pod = (s.template && s.template.spec) || {};
  const labels = (s.template && s.template.metadata && s.template.metadata.labels) || {};
  if (s.completionMode !== "Indexed") err(`completionMode is ${s.completionMode}, want Indexed`);
  if (s.completions !== s.parallelism)
    err(`completions (${s.completions}) != parallelism (${s.parallelism})`);
  const label = job.metadata.labels && job.metadata.labels["ringmaster.io/world-size"];
  if (label !== undefined && Number(label) !== s.completions)
    err(`completions (${s.completions}) != world size label (${label})`);
  if (opts.world !== undefined && s.completions !== opts.world)
    err(`completions (${s.completions}) != expected world size (${opts.world})`);
  if (pod.restartPolicy !== "Never") err(`restartPolicy is ${pod.restartPolicy}, want Never`);
  if (!pod.subdomain) {
    err("spec.template.spec.subdomain is missing (pods need DNS names through a headless Service)");
  } else {
    const svc = find(objs, "Service", nsOf(job), pod.subdomain);
    if (!svc) err(`subdomain ${pod.subdomain} names no Service in the inputs`);
    else {
      if (svc.spec.clusterIP !== "None") err(`Service ${pod.subdomain} is not headless (clusterIP: None)`);
      if (!selects(svc.spec.selector, labels))
        err(`Service ${pod.subdomain} selector ${JSON.stringify(svc.spec.selector)} does not select the Job's pod labels ${JSON.stringify(labels)}`);
    }
  }
  const anySecret = objs.some((o) => o.kind === "Secret");
  for (const c of pod.containers || [])
    for (const e of c.env || []) {
      const ref = e.valueFrom && e.valueFrom.secretKeyRef;
      if (ref && anySecret && !find(objs, "Secret", nsOf(job), ref.name))
        err(`env ${e.name} refers to Secret ${ref.name}, not in the inputs`);
    }
}

function checkDeployment(dep, objs, err) {
  const s = dep.spec || {};
  const labels = (s.template && s.template.metadata && s.template.metadata.labels) || {};
  const match = s.selector && s.selector.matchLabels;
  if (!selects(match, labels)) err("selector.matchLabels does not select the pod template labels");
  const vols = (s.template && s.template.spec && s.template.spec.volumes) || [];
  const claims = vols.filter((v) => v.persistentVolumeClaim).map((v) => v.persistentVolumeClaim.claimName);
  for (const name of claims)
    if (!find(objs, "PersistentVolumeClaim", nsOf(dep), name)) err(`claimName ${name} names no PVC in the inputs`);
  if (claims.length > 0) {
    if ((s.replicas === undefined ? 1 : s.replicas) !== 1) err("replicas must be 1 (one SQLite writer)");
    if (!s.strategy || s.strategy.type !== "Recreate") err("strategy must be Recreate (one SQLite writer)");
  }
  const svc = objs.find((o) => o.kind === "Service" && nsOf(o) === nsOf(dep) && selects(o.spec && o.spec.selector, labels));
  if (!svc) err("no Service in the inputs selects its pods");
}

// Returns a list of "KIND/NAME: message" errors; [] when everything is valid.
export async function validateTexts(inputs, opts = {}) {
  const errors = [];
  const objs = [];
  for (const { name, text } of inputs) {
    for (const doc of parseAllDocuments(text)) {
      if (doc.errors && doc.errors.length) {
        errors.push(`${name}: YAML: ${doc.errors[0].message}`);
        continue;
      }
      const obj = doc.toJS();
      if (obj === null || obj === undefined) continue;
      if (typeof obj !== "object" || !obj.apiVersion || !obj.kind || !obj.metadata) {
        errors.push(`${name}: a document without apiVersion/kind/metadata`);
        continue;
      }
      for (const e of await schemaErrors(obj)) errors.push(`${name}: ${idOf(obj)}: schema: ${e}`);
      objs.push(obj);
    }
  }
  if (objs.length === 0) errors.push("no Kubernetes objects in the input");
  for (const o of objs) {
    const err = (m) => errors.push(`${idOf(o)}: ${m}`);
    if (o.kind === "Job") checkJob(o, objs, opts, err);
    if (o.kind === "Deployment") checkDeployment(o, objs, err);
  }
  return { errors, objs };
}

async function main(argv) {
  const opts = {};
  const inputs = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--expect-world") opts.world = Number(argv[++i]);
    else if (argv[i] === "-") inputs.push({ name: "<stdin>", text: readFileSync(0, "utf8") });
    else inputs.push({ name: argv[i], text: readFileSync(argv[i], "utf8") });
  }
  if (inputs.length === 0) {
    console.error("usage: node validate.mjs [--expect-world N] FILE|- ...");
    return 2;
  }
  const { errors, objs } = await validateTexts(inputs, opts);
  for (const e of errors) console.log(`ERROR ${e}`);
  if (errors.length === 0) for (const o of objs) console.log(`ok ${idOf(o)}`);
  return errors.length ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then((rc) => process.exit(rc));
}
