// vramwise serve: the page. A thin client of the JSON API (/api/...); no libraries, no network beyond this server.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const GIB = 2 ** 30;
  const COMPONENTS = ["weights", "lora", "optimizer", "gradients", "activations", "overhead"];
  const COLORS = { weights: "#2f5fd0", lora: "#9b59b6", optimizer: "#e67e22", gradients: "#c0392b",
    activations: "#16a085", overhead: "#7f8c8d", "KV cache": "#27ae60" };
  const FIELDS = ["method", "batch_size", "seq_len", "lora_rank", "target_modules", "gradient_checkpointing",
    "optimizer", "attention", "loss", "load_in_4bit", "strategy", "offload", "gpus_per_node"];
  const SVGNS = "http://www.w3.org/2000/svg";
  const state = { table: {}, defaultProfile: null, models: [], upload: null, uploadName: null, seq: 0, inflight: null, timer: null,
    recipe: null, formats: {}, servingProfiles: [], localProfiles: [], gpus: [], summaries: {}, unread: new Set() };
  // recipe: {parts: [{name, text}], framework, data: /api/recipe's answer, catalog}; gpus: /api/gpus's catalog;
  // unread: the fields of the address the page could not read, no figures until the person chooses each
  //: the GPU the serving mode starts on when none is chosen
  const SERVING_GPU = "h100-sxm";

  const gib = (n) => (n / GIB).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const count = (n) => n >= 1e9 ? (n / 1e9).toFixed(2) + " B" : n >= 1e6 ? (n / 1e6).toFixed(2) + " M" : String(n);
  const int = (n) => n === null || n === undefined ? "none fits" : n.toLocaleString("en-US");

  function el(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function h(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
  const serving = window.vramwiseServing({ $, el, h, clear, gib });  // serving.js: the serving mode's drawing
  const SERVING_FIELDS = serving.FIELDS;
  const isServing = () => $("mode").value === "serving";
  const local = window.vramwiseLocal({ $, el, h, clear, gib });  // local.js: the local-inference mode (a GGUF file)
  const LOCAL_FIELDS = local.FIELDS;
  const isLocal = () => $("mode").value === "local";

  async function api(path, body, signal) {
    const opts = body === undefined ? { signal } : { method: "POST", body: JSON.stringify(body), signal,
      headers: { "Content-Type": "application/json" } };
    const r = await fetch(path, opts);
    let data;
    try { data = await r.json(); } catch (e) { data = { error: "the server answered " + r.status + " without JSON" }; }
    if (!r.ok) { const err = new Error(data.error || ("HTTP " + r.status)); err.status = r.status; throw err; }
    return data;
  }

  // -- the form -----------------------------------------------------------------------------
  function fillSelect(sel, values, labels) {
    clear(sel);
    values.forEach((v, i) => { const o = h("option", labels ? labels[i] : v); o.value = v; sel.appendChild(o); });
  }

  function modelLabel(m) { return m.id + "  " + count(m.params); }  // the family: searched, and shown once chosen

  function showModels(query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    const sel = $("model-list"), keep = sel.value;
    clear(sel);
    for (const m of state.models) {
      const hay = [m.id, ...m.aliases, m.family, m.model_type || ""].join(" ").toLowerCase();
      if (words.every((w) => hay.includes(w))) { const o = h("option", modelLabel(m)); o.value = m.id; sel.appendChild(o); }
    }
    if (keep) sel.value = keep;
  }

  function currentModel() {  // with a recipe: the recipe, and the model when the server cannot find it in the catalog
    const r = isServing() ? null : state.recipe, out = {};
    if (r) { out.recipe = r.parts; if (r.framework) out.framework = r.framework; }
    if (state.upload !== null) return Object.assign(out, { config_text: state.upload });
    if (r && r.catalog) return out;
    const id = $("model-list").value;
    return id ? Object.assign(out, { model: id }) : null;
  }

  function servingSettings() {  // the serving form: the profile, inference, the GPU, the settings given
    const out = { profile: $("serving-profile").value, method: "inference" };
    if ($("gpu").value) out.gpu = $("gpu").value;
    for (const f of SERVING_FIELDS) {
      const v = formValue(f), spec = state.table[f];
      if (v === "" || (spec && v === spec.default)) continue;
      out[f] = v;
    }
    return out;
  }

  function settings() {
    if (isLocal()) return local.settings();
    if (isServing()) return servingSettings();
    const out = {};
    for (const f of FIELDS) {
      const e = $(f), spec = state.table[f];
      if (!e || e.closest("label").hidden) continue;
      let v = e.value.trim();
      if (v === "") continue;
      if (spec && spec.type === "int") { const n = Number(v); v = Number.isInteger(n) ? n : v; }
      else if (spec && spec.type === "bool") v = v === "true";
      if (spec && v === spec.default) continue;
      out[f] = v;
    }
    const p = $("profile").value;
    if (p && p !== state.defaultProfile) out.profile = p;
    if (out.strategy && out.strategy !== "none") {  // a strategy runs on the GPUs counted under "how many"
      const n = parseInt($("gpus").value, 10);
      out.world_size = Number.isInteger(n) && n > 0 ? n : 1;
    }
    return out;
  }

  // a setting's value as the form shows it
  const fieldText = (v) => v === null || v === undefined ? "" : Array.isArray(v) ? v.join(",") : String(v);

  function formValue(f) {
    const spec = state.table[f];
    let v = $(f).value.trim();
    if (v === "") return v;
    if (spec && spec.type === "int") { const n = Number(v); v = Number.isInteger(n) ? n : v; }
    else if (spec && spec.type === "float") { const n = Number(v); v = Number.isFinite(n) ? n : v; }
    else if (spec && spec.type === "bool") v = v === "true";
    return v;
  }

  // what the form changes of the loaded recipe: the fields that differ from the recipe's values (they override it)
  function recipeOverrides() {
    const d = state.recipe.data, out = {};
    for (const f of FIELDS) {
      const e = $(f);
      if (!e || e.closest("label").hidden) continue;
      const text = e.value.trim();
      if (text === fieldText(d.settings[f])) continue;
      if (text === "") { if (f === "load_in_4bit" || f === "target_modules") out[f] = null; continue; }
      out[f] = formValue(f);
    }
    const p = $("profile").value;
    if (p && p !== d.profile) out.profile = p;
    if ($("strategy").value !== "none") {
      const n = parseInt($("gpus").value, 10);
      if (Number.isInteger(n) && n > 0 && n !== d.settings.world_size) out.world_size = n;
    }
    return out;
  }

  // the settings a request carries: the form's (over vramwise's defaults), or with a recipe what the form overrides
  function requestSettings() { return state.recipe && !isServing() ? recipeOverrides() : settings(); }

  function gpuChoice() {
    const g = $("gpu").value;
    if (!g) return null;
    if (isServing()) return { gpu: g };  // vLLM runs on tensor_parallel_size x pipeline_parallel_size of them
    const n = isLocal() ? 1 : parseInt($("gpus").value, 10), given = $("headroom").value.trim(), hr = Number(given);
    const choice = { gpu: g, gpus: Number.isInteger(n) && n > 0 ? n : 1 };  // local inference: one GPU and the host
    // an empty headroom: the server keeps the device band's p90 shortfall free (answers/fit.py)
    if (given !== "" && Number.isFinite(hr)) choice.headroom = hr / 100;
    return choice;
  }

  function applies() {  // settings that do not apply to the method are hidden (SETTINGS[...].applies_to)
    const m = isServing() || isLocal() ? "inference" : $("method").value;
    for (const f of FIELDS) {
      const spec = state.table[f], e = $(f);
      if (spec && e) e.closest("label").hidden = !spec.applies_to.includes(m);
    }
  }

  // the GPU menu in the sizes the figures use: a training step fits in the memory nvidia-smi reports; a server
  // sizes its KV cache from the total CUDA reports, where the catalog knows it (answers/fit.py, the serving fit)
  // a unified-memory entry (Apple Silicon, an APU): what its GPU may use of the system's memory (the catalog's rule)
  function gpuBytes(g) {
    if (g.gpu_may_use_bytes) return g.gpu_may_use_bytes;
    return isServing() && g.cuda_total_bytes ? g.cuda_total_bytes : g.memory_bytes;
  }

  function labelGpus() {
    const byId = Object.fromEntries(state.gpus.map((g) => [g.id, g]));
    for (const o of $("gpu").options) {
      const g = byId[o.value];
      if (g) o.textContent = g.name + " (" + gib(gpuBytes(g)) + " GiB" + (g.unified ? " of " + gib(g.memory_bytes) + " unified" : "") + ")";
    }
  }

  function describeProfiles() {  // each profile menu's choice, its summary in full under the form
    $("profile-info").textContent = state.summaries[$("profile").value] || "";
    $("serving-profile-info").textContent = state.summaries[$("serving-profile").value] || "";
  }

  // the serving mode (a serving profile): its form and cards instead of the training ones
  // the local mode (local.js): a GGUF file instead of a model of the catalog, its form and card
  function showMode() {
    const on = isServing(), loc = isLocal();
    $("training-box").hidden = on || loc; $("recipe-box").hidden = on; $("serving-box").hidden = !on;
    $("model-box").hidden = loc; $("local-box").hidden = !loc; $("trace").hidden = loc;  // the trace: a catalog model's
    $("compare-card").hidden = on || loc;
    if (on || loc) $("fit-card").hidden = true;
    if (!on) $("serving-card").hidden = true;
    if (!loc) $("local-card").hidden = true;
    for (const e of document.querySelectorAll(".training-only")) e.hidden = on || loc;
    for (const e of document.querySelectorAll(".not-serving")) e.hidden = on;
    const start = on ? SERVING_GPU : loc ? local.GPU : null;
    if (start && !$("gpu").value && [...$("gpu").options].some((o) => o.value === start)) $("gpu").value = start;
    labelGpus();
    describeProfiles();
    applies();
  }

  // -- the address bar ----------------------------------------------------------------------
  function writeUrl() {
    const q = new URLSearchParams();
    const model = $("model-list").value;
    if (state.upload === null && model && !isLocal()) q.set("model", model);  // a GGUF file is not in the address
    const s = settings();
    if (isServing()) delete s.method;  // the profile says it
    for (const k in s) q.set(k, String(s[k]));
    const g = gpuChoice();
    if (g) { q.set("gpu", g.gpu); if (g.gpus > 1) q.set("gpus", g.gpus); if (g.headroom !== undefined) q.set("headroom", $("headroom").value + "%"); }  // as --headroom: 10% or 0.1
    const prof = checkedProfiles().sort().join(",");
    if (prof !== defaultCompareProfiles().sort().join(",")) q.set("compare", prof);
    const text = q.toString();
    history.replaceState(null, "", text ? "?" + text : location.pathname);
  }

  // the address as the command line reads the same values (GPU and model aliases, sizes, any spelling of a
  // setting): the server's /api/address gives each field's canonical value, which the form takes and
  // writeUrl writes back; a field it cannot read is named in the address note, never dropped unsaid
  async function readUrl() {
    const q = new URLSearchParams(location.search);
    if (![...q.keys()].length) return;
    let got;
    try { got = await api("/api/address?" + q.toString()); } catch (e) {
      state.unread.add("address"); showAddressNote(["the address: " + e.message], []); return;
    }
    const val = (k) => got.fields[k] && "value" in got.fields[k] ? got.fields[k].value : undefined;
    const problems = [], notes = [];
    for (const k in got.fields) if (got.fields[k].error) { problems.push(k + ": " + got.fields[k].error); state.unread.add(k); }
    for (const k of got.unknown) problems.push(k + ": not a field of this page");
    const model = val("model");
    if (model !== undefined) {
      if (state.models.some((x) => x.id === model)) $("model-list").value = model;
      else { problems.push("model: " + model + " is not in this page's catalog"); state.unread.add("model"); }
    }
    const show = (id, v) => {  // a value the form's list lacks (an optimizer, a GPU size) is added to it
      const e = $(id), text = fieldText(v);
      if (e.tagName === "SELECT" && ![...e.options].some((o) => o.value === text)) { const o = h("option", text); o.value = text; e.appendChild(o); }
      e.value = text;
    };
    for (const f of [...FIELDS, ...SERVING_FIELDS, ...LOCAL_FIELDS]) if (val(f) !== undefined && $(f)) show(f, val(f));
    const profile = val("profile"), preset = val("preset");
    if (profile !== undefined && state.servingProfiles.includes(profile)) {
      $("mode").value = "serving"; $("serving-profile").value = profile;
    } else if ((profile !== undefined && state.localProfiles.includes(profile)) || preset !== undefined ||
               val("modelfile") !== undefined || val("ollama_env") !== undefined) {  // an Ollama text: local too
      $("mode").value = "local";  // the file itself is asked for again
      if (preset !== undefined) $("local-preset").value = preset;
      local.placeholders();
    } else if (profile !== undefined) $("profile").value = profile;
    const gpu = got.fields.gpu;
    if (gpu && gpu.value !== undefined) {
      const sel = $("gpu");
      if (![...sel.options].some((o) => o.value === gpu.value)) { const o = h("option", gpu.name); o.value = gpu.value; sel.appendChild(o); }
      sel.value = gpu.value;
      if (gpu.note) notes.push("gpu " + q.get("gpu") + ": " + gpu.note);
    }
    if (val("gpus") !== undefined) $("gpus").value = val("gpus");
    if (val("headroom") !== undefined) $("headroom").value = String(+(val("headroom") * 100).toFixed(4));  // a share; the form shows %
    if (val("compare") !== undefined) {
      const want = val("compare");
      for (const c of document.querySelectorAll("#compare-profiles input")) c.checked = want.includes(c.value);
    }
    showAddressNote(problems, notes);
  }

  function showAddressNote(problems, notes) {
    const box = $("address-note");
    box.textContent = [...problems.map((p) => "not read from the address: " + p), ...notes].join("\n");
    box.className = problems.length ? "error" : "muted";
    box.hidden = !problems.length && !notes.length;
  }

  // -- updates ------------------------------------------------------------------------------
  // the field of the address an input of the form stands for (what it resolves once a person sets it)
  function fieldOf(target) {
    if (!target || !target.id) return null;
    if (target.closest && target.closest("#compare-profiles")) return "compare";
    return { "model-list": "model", "serving-profile": "profile", mode: "profile", "local-preset": "preset" }[target.id] || target.id;
  }

  function resolved(field) { state.unread.delete(field); state.unread.delete("address"); }

  function schedule(e) {
    if (e && e.target) resolved(fieldOf(e.target));
    showMode();
    writeUrl();
    if (state.recipe) markOverrides();
    clearTimeout(state.timer);
    state.timer = setTimeout(update, 60);
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  // no figures: a line that says what is missing, and nothing left of an earlier answer
  function blank(message) {
    if (state.inflight) state.inflight.abort();
    state.seq++;
    const total = $("total");
    total.textContent = message; total.dataset.bytes = ""; total.dataset.tokens = ""; total.className = "total prompt";
    $("verdict").textContent = ""; $("verdict").className = "verdict";
    for (const id of ["summary", "per-gpu", "band-tensors", "band-device", "status"]) $(id).textContent = "";
    for (const id of ["chart", "legend", "warnings", "compare"]) clear($(id));
    $("fit-card").hidden = true; $("serving-card").hidden = true; $("compare-card").hidden = true; $("local-card").hidden = true;
  }

  // the unread fields that hold the figures back: the model, the GPU, the profile, and each field the form shows
  // now (a serving field read wrong does not hold back a fine-tuning estimate, which does not use it)
  function unreadNow() {
    return [...state.unread].filter((k) => ["model", "gpu", "profile", "address"].includes(k) ||
      ($(k) !== null && $(k).offsetParent !== null));
  }

  function unreadMessage(unread) {
    const names = unread.map((k) => k === "gpu" ? "a GPU" : k === "model" ? "a model" : k === "address" ? "the settings" : k);
    const list = names.length > 1 ? names.slice(0, -1).join(", ") + " and " + names[names.length - 1] : names[0];
    return "choose " + list + ": the address names " + (names.length > 1 ? "values" : "one") + " this page cannot read (above)";
  }

  async function update() {
    const unread = unreadNow();
    if (unread.length) { blank(unreadMessage(unread)); return; }
    if (isLocal()) return updateLocal();
    const model = currentModel();
    if (!model) { blank(state.recipe ? "choose a model or upload its config.json" : "choose a model"); return; }
    if (state.inflight) state.inflight.abort();
    const ctl = new AbortController(), seq = ++state.seq;
    state.inflight = ctl;
    const body = Object.assign({}, model, requestSettings());
    const g = gpuChoice();
    const t0 = performance.now();
    if (isServing()) return updateServing(body, ctl, seq, t0);
    const jobs = [api("/api/estimate", body, ctl.signal)];
    jobs.push(g ? api("/api/fit", Object.assign({}, body, g), ctl.signal) : Promise.resolve(null));
    const cmp = Object.assign({}, body, { methods: ["qlora", "lora", "full"], profiles: checkedProfiles() });
    delete cmp.method; delete cmp.profile;
    if (g) { cmp.gpu = g.gpu; cmp.gpus = g.gpus; }
    jobs.push(api("/api/compare", cmp, ctl.signal).catch((e) => ({ error: e.message })));
    const got = await settled(jobs, seq);
    if (!got) return;
    const [est, fit, comparison] = got;
    showError("");
    drawEstimate(est, fit);
    drawFit(fit, est);
    drawCompare(comparison);
    $("status").textContent = "updated in " + Math.round(performance.now() - t0) + " ms";
    if ($("trace").open) loadTrace(body, seq);
  }

  // the answers of one update; null when a request failed (the error is shown) or a newer update began
  async function settled(jobs, seq) {
    try {
      const got = await Promise.all(jobs);
      return seq === state.seq ? got : null;
    } catch (e) {
      if (e.name !== "AbortError" && seq === state.seq) {
        blank("no figures: see the message above");
        showError(e.message);
      }
      return null;
    }
  }

  // the local mode: /api/local answers for the GGUF file picked (local.js reads its header and draws the answer)
  function updateLocal() {
    if (state.inflight) state.inflight.abort();
    const ctl = new AbortController(), seq = ++state.seq, g = gpuChoice();
    state.inflight = ctl;
    return local.update({ gpu: g && g.gpu, headroom: g && g.headroom !== undefined ? $("headroom").value + "%" : undefined,
      signal: ctl.signal, seq, current: (s) => s === state.seq, blank, showError, t0: performance.now() });
  }

  // the serving mode: /api/fit answers for the serving profile (its ServingFit), /api/estimate names the family
  async function updateServing(body, ctl, seq, t0) {
    if (!body.gpu) { blank("choose a GPU"); return; }
    const got = await settled([api("/api/fit", body, ctl.signal), api("/api/estimate", body, ctl.signal)], seq);
    if (!got) return;
    const [fit, est] = got;
    showError("");
    $("serving-card").hidden = false;
    serving.draw(fit, est);
    $("status").textContent = "updated in " + Math.round(performance.now() - t0) + " ms";
    if ($("trace").open) loadTrace(body, seq);
  }

  // -- the estimate -------------------------------------------------------------------------
  function parts(est) {
    if (est.settings.method === "inference" && est.inference_total) {
      const kv = est.figures.kv_cache || 0;
      return { total: est.inference_total, rows: [["weights", est.weights], ["KV cache", kv],
        ["overhead", est.inference_overhead]] };
    }
    return { total: est.total, rows: COMPONENTS.map((c) => [c, est[c]]) };
  }

  function drawEstimate(est, fit) {
    const p = parts(est);
    const total = $("total");
    total.textContent = gib(p.total) + " GiB";
    total.dataset.bytes = String(p.total);
    total.dataset.tokens = "";
    total.className = "total";
    $("headline").classList.remove("lead-verdict");
    $("headline").insertBefore(total, $("verdict"));
    const usable = fit ? fit.usable_bytes * (est.strategy ? 1 : fit.gpus) : null;  // a strategy's figures are one GPU's
    const verdict = $("verdict");
    if (fit) {  // fits / tight / does not fit (fit.verdict), at the headroom given or the device band's
      const v = fit.verdict;
      verdict.textContent = v.label + " " + (fit.gpus > 1 ? fit.gpus + " x " : "") + fit.gpu.name +
        " (" + gib(fit.usable_bytes) + " GiB usable" + (fit.gpus > 1 ? " each" : "") + ")";
      verdict.title = v.summary;  // the margin and the headroom's source, also the first line of the fit card
      verdict.className = "verdict " + (v.label === "fits" ? "fits" : v.label === "tight" ? "tight" : "nofit");
    } else { verdict.textContent = ""; verdict.className = "verdict"; }
    const s = est.settings;
    $("summary").textContent = "family " + est.family + (est.model_type ? " (" + est.model_type + ")" : "") + ", profile " +
      est.profile + "; " + s.method + ", batch " + s.batch_size + ", seq " + s.seq_len + "; " + count(est.params_total) +
      " parameters, " + count(est.params_trainable) + " trainable" +
      (s.method === "inference" ? "; the total is weights + KV cache + overhead" : "");
    const unified = fit && fit.gpu.source.startsWith("unified memory:") ? fit.gpu.source.split("; the system's memory: ")[0] : "";
    if (unified) $("summary").textContent += "; " + unified;  // the GPU's share of a unified memory, in one line
    // one stacked bar, the GPU's usable memory as a line
    const svg = $("chart");
    clear(svg);
    const W = 620, x0 = 10, top = Math.max(p.total, usable || 0) * 1.04 || 1;
    let x = x0;
    for (const [name, v] of p.rows) {
      const w = (v / top) * W;
      if (v <= 0) continue;
      const r = el("rect", { x: x.toFixed(2), y: 14, width: Math.max(w, 0.5).toFixed(2), height: 40, fill: COLORS[name],
        class: "bar", "data-component": name, "data-bytes": v });
      r.appendChild(el("title", {}, name + ": " + gib(v) + " GiB"));
      svg.appendChild(r);
      x += w;
    }
    svg.appendChild(el("text", { x: Math.min(x + 4, W - 60), y: 10 }, gib(p.total) + " GiB"));
    if (usable) {
      const ux = x0 + (usable / top) * W;
      svg.appendChild(el("line", { x1: ux, x2: ux, y1: 4, y2: 66, stroke: fit.fits ? "#1b7f3b" : "#b3261e",
        "stroke-width": 2, "stroke-dasharray": "4 3", id: "gpu-line" }));
      svg.appendChild(el("text", { x: Math.max(ux - 150, 0), y: 80 }, "usable " + gib(usable) + " GiB"));
    }
    const legend = $("legend");
    clear(legend);
    for (const [name, v] of p.rows) {
      const li = h("li", "");
      const sw = h("i"); sw.style.background = COLORS[name];
      li.appendChild(sw);
      li.appendChild(document.createTextNode(name + " " + gib(v) + " GiB (" + (p.total ? (100 * v / p.total).toFixed(1) : "0.0") + "%)"));
      legend.appendChild(li);
    }
    $("per-gpu").textContent = est.strategy
      ? "strategy " + est.strategy + " on " + est.world_size + " GPU(s), the chart is one GPU: " +
        est.per_rank.map((r) => r.count + " x " + gib(r.total) + " GiB (" + r.role + ")").join(", ") +
        "; host memory per machine " + gib(est.host_bytes) + " GiB"
      : perGpuText(est);
    // the two bands: tensor peaks against CPU-measured steps (accuracy/bands.yaml), device totals against
    // published GPU runs (accuracy/device_bands.yaml)
    const tensors = $("band-tensors"), device = $("band-device");
    tensors.textContent = est.error_band.tensors.summary;
    tensors.dataset.measured = String(est.error_band.tensors.measured);
    device.textContent = est.error_band.device.summary;
    device.dataset.measured = String(est.error_band.device.covered);
    const warn = $("warnings");
    clear(warn);
    for (const w of est.warnings) warn.appendChild(h("li", w));
  }

  // the per-GPU line without a strategy: the best strategy of each GPU count (per_gpu_by_strategy, the
  // server's figures), the profile's split rule where it is kept, the KV-cache split for inference
  function perGpuText(est) {
    const p = est.per_gpu_by_strategy;
    const counts = (f) => Object.entries(f).map(([n, b]) => n + " x " + gib(b) + " GiB").join(", ");
    if (!p || (est.settings.method === "inference" && est.inference_total)) return "minimum per GPU: " + counts(est.min_per_gpu);
    const parts = [];
    if (p.strategies.length && !Object.values(p.counts).some((c) => c.best)) {
      parts.push("per GPU: every strategy (" + p.strategies.join(", ") + ") refuses these settings");
    } else if (p.strategies.length) {
      parts.push("per GPU, the best strategy: " + Object.entries(p.counts).map(([n, c]) =>
        n + " x " + (c.best ? gib(c.per_gpu[c.best]) + " GiB (" + c.best + ")" : "none (every strategy refuses)")).join(", "));
    }
    if (p.split_rule) parts.push("per GPU by the profile's split rule (no strategy): " + counts(p.split_rule));
    return parts.join("; ");
  }

  // -- what to change so it fits (fit.advice: each change estimated again by the server) -----------
  function drawAdvice(fit) {
    const box = $("fit-advice"), list = $("advice-list");
    clear(list);
    const advice = fit.advice || [];
    box.hidden = fit.fits;
    if (fit.fits) return;
    // changes the stack cannot run (a warning marked blocks: true): listed apart, never ranked
    const blocked = () => { for (const b of fit.blocked || []) list.appendChild(h("li", "blocked: " + b.description + " (" + b.why + ")", "muted")); };
    if (!advice.length) { list.appendChild(h("li", "no change vramwise models makes it fit")); blocked(); return; }
    const text = (v) => Array.isArray(v) ? v.join(",") : String(v);
    for (const a of advice) {
      const li = h("li");
      // a.strategy: the best strategy, where it places a run without one on several GPUs
      const head = h("span", gib(a.per_gpu) + " GiB per GPU" + (a.gpus !== fit.gpus || a.strategy ? " on " + a.gpus + " GPUs" : "") +
        (a.strategy ? " with " + a.strategy : "") + ": " + (a.fits ? "fits" : "does not fit"), a.fits ? "fits" : "nofit");
      li.appendChild(head);
      li.appendChild(h("span", " " + a.description));
      li.appendChild(h("div", "set " + Object.entries(a.changes).map(([k, v]) => k + "=" + text(v)).join(", "), "muted"));
      if (a.recipe_changes) li.appendChild(h("div", "in the recipe: " +
        Object.entries(a.recipe_changes).map(([k, v]) => k + ": " + text(v)).join(", "), "muted"));
      list.appendChild(li);
    }
    blocked();
  }

  // -- fit and frontier ---------------------------------------------------------------------
  function drawFit(fit, est) {
    $("fit-card").hidden = !fit;
    if (!fit) return;
    $("fit-gpu").textContent = (fit.gpus > 1 ? fit.gpus + " x " : "") + fit.gpu.name;
    const t = $("fit-table");
    clear(t);
    const row = (a, b) => { const tr = h("tr"); tr.appendChild(h("td", a)); tr.appendChild(h("td", b, "num")); t.appendChild(tr); };
    // the verdict with its margin and the headroom kept: given, or the device band's p90 shortfall
    const vr = h("tr"), vd = h("td", fit.verdict.summary, "muted");
    vd.id = "fit-verdict";
    vd.colSpan = 2;
    vr.appendChild(vd);
    t.appendChild(vr);
    for (const m of fit.methods) row(m.method, m.total === null || m.per_gpu === null ? "—" : gib(m.per_gpu) + " GiB per GPU" +
      (m.strategy ? " with " + m.strategy : "") + ": " + (m.fits ? "fits" : "does not fit"));
    row("largest batch at seq " + int(fit.settings.seq_len), int(fit.max_batch_size));
    row("largest sequence at batch " + fit.settings.batch_size, int(fit.max_seq_len));
    // fit's notes (the cap at the model's context window, with what memory alone allows), under the row they qualify
    for (const n of fit.notes || []) {
      const tr = h("tr"), td = h("td", n, "muted");
      td.colSpan = 2;
      tr.appendChild(td);
      t.appendChild(tr);
    }
    if (fit.max_lora_rank !== null || ["lora", "qlora"].includes(fit.settings.method)) row("largest LoRA rank", int(fit.max_lora_rank));
    row("fewest GPUs", fit.min_gpus === null ? "more than 1,024" : String(fit.min_gpus) +
      (fit.min_gpus_strategy ? " with " + fit.min_gpus_strategy + ", " + gib(fit.min_gpus_per_gpu) + " GiB each" : ""));
    drawAdvice(fit);
    // the frontier: largest batch per sequence length, log2 axes
    const svg = $("frontier");
    clear(svg);
    const L = 52, R = 620, T = 14, B = 220;
    const pts = fit.frontier;
    const xs = pts.map((p) => Math.log2(p.seq_len));
    const ys = pts.filter((p) => p.max_batch_size).map((p) => Math.log2(p.max_batch_size));
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(1, ...ys);
    const X = (s) => L + (x1 > x0 ? (Math.log2(s) - x0) / (x1 - x0) : 0.5) * (R - L);
    const Y = (b) => B - (Math.log2(b) / y1) * (B - T);
    svg.appendChild(el("line", { x1: L, x2: R, y1: B, y2: B, stroke: "#999" }));
    svg.appendChild(el("line", { x1: L, x2: L, y1: T, y2: B, stroke: "#999" }));
    for (let k = 0; k <= y1; k += Math.max(1, Math.ceil(y1 / 6))) {
      svg.appendChild(el("text", { x: 4, y: Y(2 ** k) + 4 }, (2 ** k).toLocaleString("en-US")));
    }
    pts.forEach((p, i) => { if (i % 2 === 0) svg.appendChild(el("text", { x: X(p.seq_len) - 14, y: B + 16 }, p.seq_len >= 1024 ? (p.seq_len / 1024) + "K" : String(p.seq_len))); });
    svg.appendChild(el("text", { x: R - 130, y: B + 34 }, "sequence length (tokens)"));
    svg.appendChild(el("text", { x: L + 6, y: T + 2 }, "largest batch"));
    const fits = pts.filter((p) => p.max_batch_size);
    if (fits.length) svg.appendChild(el("polyline", { points: fits.map((p) => X(p.seq_len) + "," + Y(p.max_batch_size)).join(" "),
      fill: "none", stroke: "#2f5fd0", "stroke-width": 2, class: "frontier-line" }));
    for (const p of pts) {
      if (p.max_batch_size) svg.appendChild(el("circle", { cx: X(p.seq_len), cy: Y(p.max_batch_size), r: 3, fill: "#2f5fd0", class: "point" }));
      else svg.appendChild(el("text", { x: X(p.seq_len) - 4, y: B - 4, fill: "#b3261e", class: "nofit-mark" }, "✕"));
    }
    const s = fit.settings;
    if (s.seq_len >= 2 ** x0 && s.seq_len <= 2 ** x1) {
      svg.appendChild(el("circle", { cx: X(s.seq_len), cy: Y(Math.max(1, s.batch_size)), r: 6, fill: fit.fits ? "#1b7f3b" : "#b3261e",
        stroke: "#fff", "stroke-width": 2, id: "you" }, undefined)).appendChild(el("title", {}, "your settings"));
    }
  }

  // -- compare ------------------------------------------------------------------------------
  function defaultCompareProfiles() { return [state.defaultProfile, "hf"].filter((p) => state.profiles.includes(p)); }
  function checkedProfiles() { return [...document.querySelectorAll("#compare-profiles input:checked")].map((c) => c.value); }

  function drawCompare(c) {
    const svg = $("compare");
    clear(svg);
    if (!c || c.error) { svg.appendChild(el("text", { x: 10, y: 20 }, c ? c.error : "")); return; }
    const cells = c.cells;
    const totals = cells.filter((x) => x.total).map((x) => x.total);
    const gpuMem = c.gpu ? c.gpu.memory_bytes : 0;
    const top = Math.max(gpuMem, ...totals, 1) * 1.08;
    // T: a band above the tallest bar (top is 1.08 x the tallest) for the GPU's key, so the key never crosses a bar
    const L = 10, R = 630, B = 200, T = 30, n = cells.length, slot = (R - L) / Math.max(n, 1), bw = Math.min(60, slot * 0.6);
    cells.forEach((cell, i) => {
      const cx = L + slot * i + slot / 2;
      svg.appendChild(el("text", { x: cx - slot / 2 + 4, y: B + 16 }, cell.profile + "/" + cell.method));
      if (!cell.total) { svg.appendChild(el("text", { x: cx - 10, y: B - 6 }, "n/a")); return; }
      let y = B;
      for (const comp of COMPONENTS) {
        const hgt = (cell[comp] / top) * (B - T);
        if (hgt <= 0) continue;
        y -= hgt;
        const r = el("rect", { x: cx - bw / 2, y: y.toFixed(2), width: bw, height: hgt.toFixed(2), fill: COLORS[comp], class: "bar" });
        r.appendChild(el("title", {}, cell.profile + "/" + cell.method + " " + comp + ": " + gib(cell[comp]) + " GiB"));
        svg.appendChild(r);
      }
      svg.appendChild(el("text", { x: cx - bw / 2, y: y - 4 }, gib(cell.total) + (cell.fits === true ? " ✓" : cell.fits === false ? " ✕" : "")));
    });
    if (gpuMem) {
      const gy = B - (gpuMem / top) * (B - T);
      svg.appendChild(el("line", { x1: L, x2: R, y1: gy, y2: gy, stroke: "#555", "stroke-dasharray": "5 4" }));
      const key = el("text", { x: R, y: 11, "text-anchor": "end", id: "compare-gpu-label" }, c.gpu.name + " " + gib(gpuMem) + " GiB");
      svg.appendChild(key);
      const kx = R - key.getComputedTextLength() - 6;  // the key's sample of the dashed line, before its words
      svg.appendChild(el("line", { x1: kx - 28, x2: kx, y1: 7, y2: 7, stroke: "#555", "stroke-dasharray": "5 4" }));
    }
  }

  // -- the trace (collapsed; loaded when opened) ----------------------------------------------
  async function loadTrace(body, seq) {
    const box = $("trace-body");
    try {
      const data = await api("/api/explain", body);
      if (seq !== state.seq) return;
      clear(box);
      let last = null;
      for (const t of data.trace) {
        if (t.component !== last) { box.appendChild(h("b", "\n[" + t.component + "]\n")); last = t.component; }
        const inputs = Object.entries(t.inputs).map(([k, v]) => k + "=" + JSON.stringify(v)).join(", ");
        box.appendChild(document.createTextNode(t.id + "  " + t.location + "\n    " + t.expression +
          (inputs ? "\n    with " + inputs : "") + "\n    = " + JSON.stringify(t.value) + " " + (t.unit || "") + "\n"));
      }
    } catch (e) { box.textContent = e.message; }
  }

  // -- start ----------------------------------------------------------------------------------
  async function start() {
    const [table, catalog, gpus, families, formats] = await Promise.all([
      api("/api/settings"), api("/api/catalog"), api("/api/gpus"), api("/api/families"),
      api("/api/formats").catch(() => ({ formats: [] }))]);
    for (const s of table.settings) state.table[s.name] = s;
    state.defaultProfile = table.default_profile;
    state.servingProfiles = table.serving_profiles || [];
    state.localProfiles = table.local_profiles || [];  // a GGUF file's profiles: the local mode's, not the training menu's
    local.init(table);
    for (const f of ["method", "gradient_checkpointing", "attention", "loss", "strategy", "offload"]) fillSelect($(f), state.table[f].choices);
    for (const f of ["method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing", "optimizer", "attention", "loss",
      "strategy", "offload", "gpus_per_node"]) {
      $(f).value = state.table[f].default;
    }
    state.profiles = families.profiles.filter((p) => p !== "size_only" && !state.servingProfiles.includes(p) &&
      !state.localProfiles.includes(p));
    state.summaries = families.profile_summaries || {};
    fillSelect($("serving-profile"), state.servingProfiles);
    if (!state.servingProfiles.length && !state.localProfiles.length) { $("mode-box").hidden = true; }
    fillSelect($("kv_cache_dtype"), state.table.kv_cache_dtype.choices);
    for (const f of SERVING_FIELDS) {
      const spec = state.table[f];
      $(f).value = spec.default === null ? "" : String(spec.default);
      $(f).closest("label").title = spec.help;
    }
    fillSelect($("profile"), state.profiles);
    $("profile").value = state.defaultProfile;
    const box = $("compare-profiles");
    for (const p of state.profiles) {
      const lab = h("label"), cb = h("input");
      cb.type = "checkbox"; cb.value = p; cb.checked = defaultCompareProfiles().includes(p);
      lab.appendChild(cb); lab.appendChild(document.createTextNode(p)); box.appendChild(lab);
    }
    state.models = catalog.models;
    for (const f of formats.formats) {
      state.formats[f.format] = f;
      if (f.part) continue;  // a format named here is the main file's; the parts are read from their content
      const o = h("option", f.format + " (" + f.framework + " " + f.version + ")"); o.value = f.format; o.title = f.description;
      $("recipe-format").appendChild(o);
    }
    showModels("");
    const gsel = $("gpu");
    state.gpus = gpus.catalog;
    for (const g of gpus.catalog) { const o = h("option", g.name); o.value = g.id; gsel.appendChild(o); }
    if (gpus.local && gpus.local.visible && gpus.local.visible.length) { const o = h("option", "local: the visible GPUs"); o.value = "local"; gsel.appendChild(o); }
    await readUrl();
    if (!$("model-list").value && state.models.length && !state.unread.has("model")) {
      const dflt = state.models.find((m) => m.id === "meta-llama/Llama-3.1-8B") || state.models[0];
      $("model-list").value = dflt.id;
    }
    $("model-search").addEventListener("input", (e) => showModels(e.target.value));
    $("model-list").addEventListener("change", () => {
      state.upload = null; resolved("model");
      if (state.recipe && state.recipe.catalog) dropRecipe();  // another model: the recipe is left
      describeModel(); schedule();                              // (a recipe whose model is not in the catalog takes it)
    });
    $("recipe-files").addEventListener("change", () => loadRecipe().catch((e) => showError(e.message)));
    $("recipe-format").addEventListener("change", () => { if ($("recipe-files").files.length) loadRecipe(true).catch((e) => showError(e.message)); });
    $("recipe-clear").addEventListener("click", () => { dropRecipe(); describeModel(); schedule(); });
    for (const id of [...FIELDS, ...SERVING_FIELDS, ...LOCAL_FIELDS, "mode", "serving-profile", "local-preset", "profile", "gpu",
      "gpus", "headroom"]) $(id).addEventListener("input", schedule);
    $("local-preset").addEventListener("input", local.placeholders);
    $("gguf-file").addEventListener("change", (e) => { local.pick(e.target.files[0]); schedule(); });
    box.addEventListener("change", schedule);
    $("upload").addEventListener("change", async (e) => {
      const f = e.target.files[0];
      if (!f) return;
      if (f.size > 1024 * 1024) { showError("the file is " + f.size.toLocaleString("en-US") + " bytes; at most 1 MiB is accepted"); return; }
      state.upload = await f.text(); state.uploadName = f.name; resolved("model"); describeModel(); schedule();
    });
    $("paste-apply").addEventListener("click", () => {
      state.upload = $("paste").value; state.uploadName = "pasted config"; resolved("model"); describeModel(); schedule();
    });
    $("trace").addEventListener("toggle", () => { if ($("trace").open) loadTrace(Object.assign({}, currentModel(), requestSettings()), state.seq); });
    describeModel();
    showMode();
    writeUrl();
    await update();
    document.body.dataset.ready = "1";
  }

  // where a catalog entry's dimensions come from, in the reader's terms (the catalog's source line names the
  // files it was built from: `vramwise catalog --json` has it)
  function origin(m) {
    return m.kind === "hub config" ? "dimensions from a copy of its config.json" : m.kind === "family example" ?
      "dimensions of an example written by hand for the family" : "dimensions from the catalog";
  }

  function describeModel() {
    const with_ = state.recipe ? " with the recipe" : "";
    if (state.upload !== null) { $("model-info").textContent = "your config: " + state.uploadName + with_ + " (not kept in the address)"; return; }
    if (state.recipe && !state.recipe.catalog && !$("model-list").value) { $("model-info").textContent = "the recipe's model: not in the catalog"; return; }
    const m = state.models.find((x) => x.id === $("model-list").value);
    $("model-info").textContent = m ? m.id + ": " + count(m.params) + " parameters, family " + m.family + "; " + origin(m) + with_ : "";
  }

  // -- a training recipe (POST /api/recipe reads it; the page's requests carry it while it is loaded) ----------
  const MAX_RECIPE_CHARS = 900 * 1024;  // the parts' text together, under the server's 1 MiB body

  function mainFirst(parts) {  // the likeliest main file first: YAML before JSON (DeepSpeed, PEFT, bitsandbytes parts)
    const json = (p) => /\.json$/i.test(p.name) ? 1 : 0;
    return [...parts].sort((a, b) => json(a) - json(b));
  }

  async function loadRecipe(again) {  // again: the same files in another format (an uploaded config.json stays)
    const files = [...$("recipe-files").files];
    if (!files.length) return;
    if (files.length > 8) { showError("a recipe has at most 8 files; " + files.length + " were chosen"); return; }
    const size = files.reduce((n, f) => n + f.size, 0);
    if (size > MAX_RECIPE_CHARS) { showError("the recipe's files are " + size.toLocaleString("en-US") + " bytes; at most 900 KiB are accepted"); return; }
    const parts = await Promise.all(files.map(async (f) => ({ name: f.name, text: await f.text() })));
    const framework = $("recipe-format").value || null;
    // each file as the main one in turn until the main one reads as a recipe, not as a part of one (a DeepSpeed JSON...)
    let found = null, fallback = null, failure = null;
    for (const main of mainFirst(parts)) {
      const ordered = [main, ...parts.filter((p) => p !== main)];
      const body = { recipe: ordered };
      if (framework) body.framework = framework;
      try {
        const data = await api("/api/recipe", body);
        const fmt = state.formats[data.format];
        if (!(fmt && fmt.part) || parts.length === 1) { found = [ordered, data]; break; }
        if (!fallback) fallback = [ordered, data];
      } catch (e) { if (!failure) failure = e; }
    }
    const got = found || (failure ? null : fallback);
    if (!got) { showError(failure.message); return; }
    showError("");
    applyRecipe(got[0], framework, got[1], again && !got[1].catalog_model);
  }

  function applyRecipe(parts, framework, data, keepUpload) {
    state.recipe = { parts, framework, data, catalog: data.catalog_model };
    resolved("model");
    if (!keepUpload) state.upload = null;
    if (data.catalog_model) {
      $("model-search").value = "";
      showModels("");
      $("model-list").value = data.catalog_model;
    } else $("model-list").value = "";
    for (const f of FIELDS) if ($(f)) $(f).value = fieldText(data.settings[f]);
    if (state.profiles.includes(data.profile)) $("profile").value = data.profile;
    if (data.settings.strategy && data.settings.strategy !== "none") $("gpus").value = data.settings.world_size;
    showRecipe();
    describeModel();
    schedule();
  }

  function dropRecipe() {
    state.recipe = null;
    $("recipe-files").value = "";
    $("recipe-loaded").hidden = true;
    clear($("recipe-origins")); clear($("recipe-warnings"));
  }

  function showRecipe() {
    const d = state.recipe.data;
    $("recipe-loaded").hidden = false;
    $("recipe-name").textContent = d.parts.map((p) => p.file + " (" + p.format + ")").join(" + ") +
      (d.framework ? ", " + d.framework + " " + d.framework_version + " defaults" : "");
    const model = $("recipe-model");
    if (d.catalog_model) { model.textContent = "model " + d.model + ": " + d.catalog_model + " of the catalog"; model.className = ""; }
    else {
      model.textContent = d.model ? "the recipe's model " + d.model + " is not in the catalog: upload its config.json (or choose a model of the catalog for it)"
        : "the recipe names no model: upload its config.json (or choose a model of the catalog for it)";
      model.className = "nofit";
      $("upload-box").open = true;
    }
    const list = $("recipe-origins");
    clear(list);
    const valueOf = (k) => k in d.settings ? d.settings[k] : k in d.extras ? d.extras[k] : k === "model" ? d.model : k === "profile" ? d.profile : null;
    for (const [k, o] of Object.entries(d.origins)) {
      const li = h("li");
      li.dataset.setting = k; li.dataset.kind = o.kind;
      li.appendChild(h("code", k + " = " + fieldText(valueOf(k))));
      li.appendChild(h("span", " " + o.text, "origin"));
      list.appendChild(li);
    }
    const warn = $("recipe-warnings");
    clear(warn);
    for (const w of d.warnings) warn.appendChild(h("li", w));
    markOverrides();
  }

  function markOverrides() {  // the settings the form overrides, struck through in the list
    const over = recipeOverrides();
    for (const li of document.querySelectorAll("#recipe-origins li")) {
      const k = li.dataset.setting, on = k in over;
      li.classList.toggle("overridden", on);
      const old = li.querySelector(".page");
      if (old) old.remove();
      if (on) li.appendChild(h("span", " the page: " + fieldText(over[k]), "page"));
    }
  }

  start().catch((e) => showError(e.message));
})();
