#!/usr/bin/env node
// tests/k8s/selftest.mjs - the validator must refuse broken manifests, each for
// the right reason. Every case mutates a copy of deploy/k8s/*.yaml (parsed), and
// checks that validateTexts reports an error containing the expected words; the
// unmodified files must pass. Exits 1 on the first case that does not behave.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, stringify } from "yaml";
import { validateTexts } from "./validate.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const deploy = join(here, "..", "..", "deploy", "k8s");
const load = (f) => parseAllDocuments(readFileSync(join(deploy, f), "utf8")).map((d) => d.toJS()).filter(Boolean);
const pick = (docs, kind) => docs.find((o) => o.kind === kind);

const cases = [
  ["unmodified", () => {}, null],
  ["subdomain names no Service", (w) => { pick(w, "Job").spec.template.spec.subdomain = "other"; }, "names no Service"],
  ["Service selects other pods", (w) => { pick(w, "Service").spec.selector["ringmaster.io/job"] = "2"; }, "does not select the Job's pod labels"],
  ["Service not headless", (w) => { delete pick(w, "Service").spec.clusterIP; }, "not headless"],
  ["parallelism != completions", (w) => { pick(w, "Job").spec.parallelism = 3; }, "!= parallelism (3)"],
  ["not Indexed", (w) => { pick(w, "Job").spec.completionMode = "NonIndexed"; }, "want Indexed"],
  ["world-size label", (w) => { pick(w, "Job").metadata.labels["ringmaster.io/world-size"] = "8"; }, "world size label (8)"],
  ["expected world", () => {}, "expected world size (5)", { world: 5 }],
  ["restartPolicy", (w) => { pick(w, "Job").spec.template.spec.restartPolicy = "OnFailure"; }, "want Never"],
  ["Secret missing", (w) => { pick(w, "Secret").metadata.name = "renamed"; }, "refers to Secret"],
  ["schema: completions a string", (w) => { pick(w, "Job").spec.completions = "4"; }, "schema"],
  ["schema: label not a string", (w) => { pick(w, "Service").metadata.labels.n = 42; }, "must be string"],
  ["replicas 2", (w, c) => { pick(c, "Deployment").spec.replicas = 2; }, "replicas must be 1"],
  ["RollingUpdate", (w, c) => { pick(c, "Deployment").spec.strategy = { type: "RollingUpdate" }; }, "Recreate"],
  ["matchLabels", (w, c) => { pick(c, "Deployment").spec.selector.matchLabels = { a: "b" }; }, "does not select the pod template"],
  ["claimName", (w, c) => { pick(c, "Deployment").spec.template.spec.volumes[0].persistentVolumeClaim.claimName = "x"; }, "names no PVC"],
  ["coordinator Service selects nothing", (w, c) => { pick(c, "Service").spec.selector = { a: "b" }; }, "no Service in the inputs selects"],
];

let bad = 0;
for (const [name, mutate, want, opts] of cases) {
  const w = load("workers.yaml");
  const c = load("coordinator.yaml");
  mutate(w, c);
  const text = (docs) => docs.map((d) => stringify(d)).join("---\n");
  const { errors } = await validateTexts(
    [{ name: "workers", text: text(w) }, { name: "coordinator", text: text(c) }], opts || {});
  const ok = want === null ? errors.length === 0 : errors.some((e) => e.includes(want));
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `: wanted ${want === null ? "no error" : `'${want}'`}, got ${JSON.stringify(errors)}`}`);
  if (!ok) bad++;
}
{
  const { errors } = await validateTexts([{ name: "broken", text: "kind: [unclosed\n" }]);
  const ok = errors.some((e) => e.includes("YAML"));
  console.log(`${ok ? "ok  " : "FAIL"} unparseable YAML`);
  if (!ok) bad++;
}
console.log(bad ? `${bad} case(s) failed` : "all cases behaved");
process.exit(bad ? 1 : 0);
