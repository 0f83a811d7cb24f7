// vramwise serve: the page's local-inference mode (llama.cpp, or Ollama with its defaults) of a GGUF file the
// person picks on their machine. The weights never leave it: the page reads the file's header (File.slice of its
// first bytes, a longer slice while the server says the header goes on, at most 64 MiB) and POSTs those bytes to
// /api/local with the file's name and size, the GPU and the settings; the answer is `fit MODEL.gguf --profile
// llama.cpp --json`'s (LocalFit.to_dict), drawn here as it is: the verdict first, the GPU's and the host's
// figures, then the answers. Loaded before app.js, which calls window.vramwiseLocal with its own helpers.
"use strict";
window.vramwiseLocal = function (lib) {
  const { $, el, h, clear, gib } = lib;
  //: the llama.cpp profile's settings the form holds, by their names in vramwise.SETTINGS (llama.cpp's names)
  const FIELDS = ["n_ctx", "n_gpu_layers", "n_parallel", "cache_type_k", "cache_type_v", "flash_attn"];
  //: the texts read as Ollama reads them (either takes the Ollama preset): a Modelfile's PARAMETER lines and
  //: NAME=VALUE lines of its environment variables, as `--modelfile` and `--ollama-env` read them
  const TEXTS = ["modelfile", "ollama_env"];
  //: the first slice of the file read, and the most (the server's cap on a header: serve_local.MAX_HEADER_BYTES)
  const FIRST = 256 * 2 ** 10, CAP = 64 * 2 ** 20;
  //: the GPU the mode starts on when none is chosen
  const GPU = "rtx-4090";
  const OK = "#1b7f3b", BAD = "#b3261e";
  const int = (n) => n.toLocaleString("en-US");
  // file: the File picked; bytes: its header (what the last answer said a request needs); table: /api/settings
  const state = { file: null, bytes: null, table: null, profile: null, presets: [] };

  function init(table) {  // the form from /api/settings: the mode, the presets, the settings' choices and help
    state.table = table;
    state.profile = (table.local_profiles || [])[0] || null;
    state.presets = table.local_presets || [];
    if (!state.profile) return;
    const o = h("option", "Local inference (llama.cpp, Ollama)"); o.value = "local"; $("mode").appendChild(o);
    for (const p of state.presets) {
      const opt = h("option", p.name === "ollama" ? "Ollama " + p.release + " (its defaults)" : p.name + " " + p.release);
      opt.value = p.name; $("local-preset").appendChild(opt);
    }
    const spec = Object.fromEntries(table.settings.map((s) => [s.name, s]));
    for (const f of FIELDS) {
      const e = $(f), s = spec[f];
      e.closest("label").title = s.help;
      if (e.tagName !== "SELECT") continue;
      clear(e);
      const d = h("option", ""); d.value = ""; e.appendChild(d);  // the default: the profile's or the preset's
      for (const c of s.choices) { const c1 = h("option", c); c1.value = c; e.appendChild(c1); }
    }
    placeholders();
  }

  // what an empty field means: the profile's default, or under a preset the preset's
  function placeholders() {
    const preset = $("local-preset").value, spec = Object.fromEntries(state.table.settings.map((s) => [s.name, s]));
    const own = preset ? preset.charAt(0).toUpperCase() + preset.slice(1) + "'s" : null;  // Ollama's
    const dflt = (f) => own ? own : f === "n_gpu_layers" ? "all" : f === "n_ctx" ? "0: the model's" :
      String(spec[f].default);
    for (const f of FIELDS) {
      const e = $(f);
      if (e.tagName === "SELECT") e.options[0].textContent = "(" + dflt(f) + ")";
      else e.placeholder = dflt(f);
    }
    const p = state.presets.find((x) => x.name === preset);
    $("local-preset-info").textContent = p ? p.summary + "; a field left empty takes " + own + " value"
      : "llama.cpp's llama-server at the profile's release; a field left empty takes its default";
  }

  // the settings given (an empty field: the default), as the address and /api/local spell them
  function settings() {
    const out = { profile: state.profile };
    if ($("local-preset").value) out.preset = $("local-preset").value;
    for (const f of FIELDS) { const v = $(f).value.trim(); if (v !== "") out[f] = v; }
    for (const f of TEXTS) { const v = $(f).value; if (v.trim() !== "") out[f] = v; }
    return out;
  }

  function pick(file) {  // a new file: its header is read again
    state.file = file || null;
    state.bytes = null;
    $("gguf-info").textContent = file ? file.name + ", " + int(file.size) + " bytes" : "";
  }

  async function post(bytes, query, signal) {
    const r = await fetch("/api/local?" + query.toString(), { method: "POST", body: bytes, signal,
      headers: { "Content-Type": "application/octet-stream" } });
    let data;
    try { data = await r.json(); } catch (e) { data = { error: "the server answered " + r.status + " without JSON" }; }
    return { ok: r.ok, data };
  }

  // the answer for the file at these settings: the header known, or slices of 256 KiB, 1, 4, 16, 64 MiB until it is
  // whole (the last one past the header holds some of the weights, which the server does not read)
  async function answer(query, signal) {
    const file = state.file;
    if (state.bytes) {
      const got = await post(state.bytes, query, signal);
      if (got.ok || !got.data.more) return got;
    }
    let n = Math.min(FIRST, file.size);
    for (;;) {
      const got = await post(await file.slice(0, n).arrayBuffer(), query, signal);
      if (got.ok) {
        if (file === state.file) state.bytes = await file.slice(0, got.data.gguf.header_bytes).arrayBuffer();
        return got;
      }
      if (!got.data.more) return got;
      if (n >= Math.min(CAP, file.size)) {
        return { ok: false, data: { error: "the header of " + file.name + " (its metadata and tensor table) is longer " +
          "than the " + int(CAP) + " bytes (64 MiB) the page reads of a file: it is not read" } };
      }
      n = Math.min(n * 4, CAP, file.size);
    }
  }

  async function update(ctx) {
    const { gpu, headroom, signal, seq, current, blank, showError, t0 } = ctx;
    if (!state.file) {
      blank("choose a GGUF file: the address keeps the settings, not the file");
      return;
    }
    if (!gpu) { blank("choose a GPU"); return; }
    const q = new URLSearchParams({ name: state.file.name, size: String(state.file.size), gpu });
    if (headroom !== undefined) q.set("headroom", headroom);
    const s = settings();
    delete s.profile;  // the preset's, else llama.cpp (the server's default)
    for (const k in s) q.set(k, s[k]);
    let got;
    try { got = await answer(q, signal); } catch (e) {
      if (e.name !== "AbortError" && current(seq)) { blank("no figures: see the message above"); showError(e.message); }
      return;
    }
    if (!current(seq)) return;
    if (!got.ok) { blank("no figures: see the message above"); showError(got.data.error || "the server refused the file"); return; }
    showError("");
    draw(got.data);
    $("status").textContent = "updated in " + Math.round(performance.now() - t0) + " ms";
  }

  function verdictClass(label) { return label === "fits" ? "fits" : label === "tight" ? "tight" : "nofit"; }

  // the headline: the verdict (fits, tight, does not fit on the GPU) and its margin first, the two totals under it
  function drawHeadline(fit) {
    const f = fit.figures, v = fit.verdict;
    const verdict = $("verdict"), total = $("total");
    verdict.textContent = v.label + " on " + fit.gpu.name;
    verdict.title = v.summary;
    verdict.className = "verdict " + verdictClass(v.label);
    $("headline").classList.add("lead-verdict");
    $("headline").insertBefore(verdict, total);
    total.textContent = "GPU " + gib(f.gpu_total) + " GiB, host " + gib(f.host_total) + " GiB";
    total.dataset.bytes = String(f.gpu_total);
    total.dataset.tokens = "";
    total.className = "total";
    const g = fit.gguf, s = fit.settings;
    $("summary").textContent = v.summary + ". " + g.describe + "; family " + g.family + " (" + g.model_type + "), profile " +
      fit.profile + (fit.preset ? ", preset " + fit.preset.preset : "") + "; n_ctx " + int(f.n_ctx) + " (" +
      int(f.n_ctx_seq) + " per sequence), n_parallel " + s.n_parallel + ", " + f.offloaded_layers + " of " + fit.layers +
      " layers offloaded";
    // the GPU's memory as one stacked bar, the usable memory as a line
    const svg = $("chart");
    clear(svg);
    const parts = [["weights", f.gpu_weights, "#2f5fd0"], ["KV cache", f.gpu_kv_cache, "#27ae60"]];
    const W = 620, x0 = 10, top = Math.max(f.gpu_total, fit.gpu.memory_bytes) * 1.04 || 1;
    let x = x0;
    for (const [name, v1, color] of parts) {
      if (!(v1 > 0)) continue;
      const w = (v1 / top) * W;
      const r = el("rect", { x: x.toFixed(2), y: 14, width: Math.max(w, 0.5).toFixed(2), height: 40, fill: color,
        class: "bar", "data-component": name, "data-bytes": v1 });
      r.appendChild(el("title", {}, "GPU " + name + ": " + gib(v1) + " GiB"));
      svg.appendChild(r);
      x += w;
    }
    const ux = x0 + (fit.usable_bytes / top) * W;
    svg.appendChild(el("line", { x1: ux, x2: ux, y1: 4, y2: 66, stroke: fit.fits ? OK : BAD, "stroke-width": 2,
      "stroke-dasharray": "4 3", id: "gpu-line" }));
    svg.appendChild(el("text", { x: Math.max(ux - 150, 0), y: 80 }, "usable " + gib(fit.usable_bytes) + " GiB"));
    const legend = $("legend");
    clear(legend);
    for (const [name, v1, color] of parts) {
      const li = h("li", ""), sw = h("i");
      sw.style.background = color;
      li.appendChild(sw);
      li.appendChild(document.createTextNode("GPU " + name + " " + gib(v1) + " GiB"));
      legend.appendChild(li);
    }
    for (const id of ["per-gpu", "band-tensors", "band-device"]) $(id).textContent = "";  // the training mode's lines
    const warn = $("warnings");
    clear(warn);
    for (const w of fit.warnings) warn.appendChild(h("li", w));
  }

  // the figures of the GPU and the host: weights, KV cache, output buffer, compute buffer (an estimate), total
  // (LocalFit's figures)
  function drawFigures(fit) {
    const f = fit.figures, t = $("local-figures");
    clear(t);
    const head = h("tr");
    for (const c of ["", "GPU", "host"]) head.appendChild(h("th", c));
    t.appendChild(head);
    const cell = (v) => v === undefined || v === null ? "—" : gib(v) + " GiB";
    const rows = [["weights", "weights", f.gpu_weights, f.host_weights], ["kv_cache", "KV cache", f.gpu_kv_cache, f.host_kv_cache],
      ["output_buffer", "output buffer (logits)", undefined, f.output_buffer],
      ["compute_buffer", "compute buffer (estimate)", f.gpu_compute_buffer, f.host_compute_buffer],
      ["total", "total", f.gpu_total, f.host_total]];
    for (const [key, label, gpu, host] of rows) {
      const tr = h("tr"); tr.dataset.key = key;
      tr.appendChild(h("td", label));
      const a = h("td", cell(gpu), "num"), b = h("td", cell(host), "num");
      if (gpu !== undefined) a.dataset.bytes = String(gpu);
      if (host !== undefined) b.dataset.bytes = String(host);
      tr.appendChild(a); tr.appendChild(b); t.appendChild(tr);
    }
  }

  // the layers n_gpu_layers puts on the GPU, in the words fit prints (llama.cpp counts the output layer)
  function layersText(fit, k) {
    if (k <= 0) return "0 (nothing fits on the GPU: the model runs from the host)";
    if (k >= fit.layers + 1) return "all (" + k + ": the " + fit.layers + " layers and the output layer)";
    const last = k === 1 ? "only the output layer" : k === 2 ? "the last layer and the output layer" :
      "the last " + (k - 1) + " layers and the output layer";
    return k + " of " + (fit.layers + 1) + " (" + last + ")";
  }

  // the answers, as `fit` prints them: the largest n_ctx, the layers at this n_ctx, the parallel sequences
  function drawAnswers(fit) {
    const f = fit.figures, s = fit.settings, t = $("local-answers");
    clear(t);
    const row = (key, a, b, value) => {
      const tr = h("tr"); tr.dataset.key = key;
      const td = h("td", b, "num");
      if (value !== undefined) td.dataset.value = value === null ? "" : String(value);
      tr.appendChild(h("td", a)); tr.appendChild(td); t.appendChild(tr);
    };
    row("max_n_ctx", "largest n_ctx", fit.max_n_ctx === null ? "none (one token of context does not fit beside the weights on the GPU)"
      : int(fit.max_n_ctx) + " (n_parallel " + s.n_parallel + ", cache " + s.cache_type_k + "/" + s.cache_type_v +
        ", n_gpu_layers " + (s.n_gpu_layers === null ? "all" : s.n_gpu_layers) + ")", fit.max_n_ctx);
    row("max_n_gpu_layers", "n_gpu_layers at n_ctx " + int(f.n_ctx), layersText(fit, fit.max_n_gpu_layers) + "; GPU " +
      gib(fit.gpu_bytes_at_max_layers) + " GiB, host " + gib(fit.host_bytes_at_max_layers) + " GiB", fit.max_n_gpu_layers);
    row("max_n_parallel", "parallel sequences of " + int(fit.slot_ctx) + " tokens each", fit.max_n_parallel === null ?
      "none (one does not fit)" : int(fit.max_n_parallel) + " (n_parallel " + int(fit.max_n_parallel) + " with n_ctx " +
      int(fit.slot_ctx * fit.max_n_parallel) + ")", fit.max_n_parallel);
    const names = Object.entries(fit.in_preset_names || {});
    if (names.length) row("in_preset_names", "the answers as " + fit.preset.preset + " options", names.map(([n, v]) => n + " " + v).join(", "));
    const notes = $("local-notes");
    clear(notes);
    for (const n of fit.notes) notes.appendChild(h("li", n));
    const origins = $("local-origins");
    clear(origins);
    $("local-origins-box").hidden = !fit.origins;
    for (const [k, o] of Object.entries(fit.origins || {})) {
      const v = s[k], li = h("li");
      li.dataset.setting = k;
      li.appendChild(h("code", k + " = " + (v === null && k === "n_gpu_layers" ? "all" : String(v))));
      li.appendChild(h("span", " " + o, "origin"));
      origins.appendChild(li);
    }
  }

  function draw(fit) {
    $("local-card").hidden = false;
    $("local-gpu").textContent = fit.gpu.name;
    drawHeadline(fit);
    drawFigures(fit);
    drawAnswers(fit);
  }

  return { FIELDS: [...FIELDS, ...TEXTS], GPU, init, placeholders, settings, pick, update, hasFile: () => state.file !== null,
    profile: () => state.profile };
};
