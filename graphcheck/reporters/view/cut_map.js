// graphcheck cut explorer: the legal-cut map of one model and a plan you can edit.
// Vanilla JavaScript, no build step, no network. `render({ model, el })` follows
// anywidget's API (the data is the traitlet "data"); the standalone page calls the
// same function on a small shim. Everything after the first draw is computed here
// from the embedded data: no new export.

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function fmt(x) {
  if (x === null || x === undefined) return "?";
  const units = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [scale, unit] of units) if (Math.abs(x) >= scale) return (x / scale).toFixed(2) + " " + unit;
  return Number.isInteger(x) ? String(x) : x.toFixed(2);
}

// The cost of each stage of `cuts` (sorted boundaries), the embedding with the first
// stage and the head with the last.
function stageCosts(data, cuts) {
  const bounds = [0, ...cuts, data.num_layers];
  const costs = [];
  for (let s = 0; s + 1 < bounds.length; s++) {
    let sum = 0;
    for (let i = bounds[s]; i < bounds[s + 1]; i++) sum += data.layers[i].cost;
    costs.push(sum);
  }
  costs[0] += data.first;
  costs[costs.length - 1] += data.last;
  return costs;
}

// Judge a plan from the map alone: legal iff every cut is a boundary the map proves
// legal (and no finding spoils the whole program).
export function judge(data, cuts) {
  const byPosition = new Map(data.boundaries.map((b) => [b.position, b]));
  const illegal = cuts.filter((c) => !byPosition.get(c).legal);
  const costs = stageCosts(data, cuts);
  const max = Math.max(...costs);
  const mean = costs.reduce((a, b) => a + b, 0) / costs.length;
  const blind = data.blind[String(costs.length)];
  return {
    legal: illegal.length === 0 && data.whole_program.length === 0,
    illegal,
    costs,
    bottleneck: max,
    imbalance: mean > 0 ? max / mean : 1,
    vsBlind: blind && blind.bottleneck > 0 ? max / blind.bottleneck : null,
  };
}

function boundaryTitle(b) {
  if (b.legal) return `boundary ${b.position}: legal (one residual crosses)`;
  const codes = b.codes.length ? b.codes.join(", ") : "a whole-program finding";
  return `boundary ${b.position}: illegal (${codes})`;
}

function layerColumn(data, layer, stageOf, peak) {
  const height = peak > 0 ? Math.max(2, (100 * layer.cost) / peak) : 0;
  const title = `layer ${layer.index}: ${layer.label}` +
    (layer.differs.length ? ` (ops: ${layer.differs.join(" ")})` : "") +
    `\n${fmt(layer.cost)} ${data.unit}`;
  return h("div", { class: `gc-layer gc-stage-${stageOf % 6}`, "data-index": layer.index, title },
    h("div", { class: "gc-bar-box" }, h("div", { class: "gc-bar", style: `height:${height}%` })),
    h("div", { class: "gc-index" }, String(layer.index)),
    h("div", { class: "gc-kind" }, layer.label));
}

function edgeColumn(name, cost, data, peak, stage) {
  const height = peak > 0 ? Math.max(2, (100 * cost) / peak) : 0;
  return h("div", { class: `gc-layer gc-edge gc-stage-${stage % 6}`, title: `${name}: ${fmt(cost)} ${data.unit}` },
    h("div", { class: "gc-bar-box" }, h("div", { class: "gc-bar", style: `height:${height}%` })),
    h("div", { class: "gc-index" }, name === "embedding" ? "E" : "H"),
    h("div", { class: "gc-kind" }, name));
}

function crossingTable(b) {
  const head = ["value", "role", "dtype", "shape", "producer", "consumers", "model source"];
  const rows = b.crossing.map((c) => h("tr", {},
    h("td", {}, c.node), h("td", {}, c.role), h("td", {}, c.dtype ?? ""),
    h("td", {}, c.shape ? `[${c.shape.join(", ")}]` : ""), h("td", {}, c.producer),
    h("td", {}, c.consumers.join(", ")), h("td", { class: "gc-source" }, c.source ?? "")));
  return h("div", { class: "gc-crossing", "data-position": b.position },
    h("h3", {}, `${boundaryTitle(b)} · ${b.crossing.length} value(s) cross` +
      (b.bytes_per_token !== null ? ` · ${fmt(b.bytes_per_token)} B per token` : "")),
    h("table", {}, h("thead", {}, h("tr", {}, head.map((t) => h("th", {}, t)))), h("tbody", {}, rows)));
}

function planPanel(data, state, onStages) {
  const verdict = judge(data, state.cuts);
  const counts = [...new Set([...Object.keys(data.plans).map(Number), state.stages])].sort((a, b) => a - b);
  const select = h("select", { class: "gc-stages-select" }, counts.map((s) => h("option", { value: s }, String(s))));
  select.value = String(state.stages);
  select.addEventListener("change", () => onStages(Number(select.value)));
  const best = data.plans[String(state.stages)];
  const note = best ? `best balanced legal plan for ${state.stages} stage(s): cuts [${best.cuts.join(", ")}]`
    : String(state.stages) in data.plans ? `no legal plan has ${state.stages} stage(s): too few legal boundaries`
    : `the page holds best plans for ${Object.keys(data.plans).join(", ")} stage(s)`;
  const text = verdict.legal ? "legal" : `illegal: cut(s) ${verdict.illegal.join(", ") || "(all)"} not proven`;
  return h("div", { class: "gc-plan" },
    h("label", {}, "stages ", select), h("span", { class: "gc-best" }, note),
    h("div", { class: `gc-verdict ${verdict.legal ? "legal" : "illegal"}`, "data-cuts": state.cuts.join(",") }, `plan [${state.cuts.join(", ")}]: ${text}`),
    h("div", { class: "gc-costs" },
      verdict.costs.map((c, i) => h("span", { class: "gc-stage-cost", "data-cost": c }, `stage ${i}: ${fmt(c)}`))),
    h("div", { class: "gc-imbalance", "data-imbalance": verdict.imbalance },
      `imbalance ${verdict.imbalance.toFixed(3)} (max / mean)` +
      (verdict.vsBlind !== null ? ` · bottleneck ${verdict.vsBlind.toFixed(3)}× the best plan that ignores legality` : "")),
    h("div", { class: "gc-command" },
      `prove it: graphcheck verify ${data.model} --cuts ${state.cuts.join(",") || "(none: one stage)"}`));
}

function draw(el, data, state) {
  const peak = Math.max(data.first, data.last, ...data.layers.map((l) => l.cost));
  const stageOf = (i) => state.cuts.filter((c) => c <= i).length;
  const strip = [edgeColumn("embedding", data.first, data, peak, 0)];
  for (const b of data.boundaries) {
    const cls = ["gc-boundary", b.legal ? "legal" : "illegal"];
    if (state.cuts.includes(b.position)) cls.push("cut");
    if (state.selected === b.position) cls.push("selected");
    strip.push(h("div", {
      class: cls.join(" "), "data-position": b.position, title: boundaryTitle(b),
      onclick: () => update({ selected: b.position, toggle: b.position }),
    }, h("span", {}, String(b.position))));
    if (b.position < data.num_layers) strip.push(layerColumn(data, data.layers[b.position], stageOf(b.position), peak));
  }
  strip.push(edgeColumn("head", data.last, data, peak, state.cuts.length));
  const legalCount = data.boundaries.filter((b) => b.legal).length;
  const selected = data.boundaries.find((b) => b.position === state.selected);
  el.replaceChildren(h("div", { class: "graphcheck-cut-map" },
    h("h2", {}, `${data.model} · ${data.num_layers} layers · ${legalCount} of ${data.boundaries.length} boundaries legal`),
    data.whole_program.length ? h("p", { class: "gc-warning" },
      `whole-program findings ${data.whole_program.join(", ")}: no boundary is legal`) : null,
    h("p", { class: "gc-help" },
      `Bars: ${data.unit}` + (data.metric === "flops" ? ` (attention at documents of ${data.doc_length} tokens)` : "") +
      ". Green boundaries are legal, red ones are not (hover for the rule codes). Click a boundary to see what " +
      "crosses it and to add or remove it as a cut. The map judges each boundary as the only cut: a plan is " +
      "legal here when each of its cuts is; graphcheck verify proves the plan as a whole."),
    h("div", { class: "gc-strip" }, strip),
    planPanel(data, state, (stages) => update({ stages })),
    selected ? crossingTable(selected) : h("p", { class: "gc-hint" }, "Click a boundary to see its crossing set.")));

  function update(change) {
    if (change.stages !== undefined) {
      const best = data.plans[String(change.stages)];
      state.stages = change.stages;
      state.cuts = best ? [...best.cuts] : [];
    }
    if (change.selected !== undefined) state.selected = change.selected;
    if (change.toggle !== undefined) {
      const at = change.toggle;
      state.cuts = state.cuts.includes(at) ? state.cuts.filter((c) => c !== at) : [...state.cuts, at].sort((a, b) => a - b);
      state.stages = state.cuts.length + 1;
    }
    draw(el, data, state);
  }
}

function initialState(data) {
  const best = data.plans[String(data.stages)];
  return { stages: data.stages, cuts: best ? [...best.cuts] : [], selected: null };
}

function render({ model, el }) {
  const show = () => draw(el, model.get("data"), initialState(model.get("data")));
  show();
  model.on("change:data", show);
}

export default { render };
