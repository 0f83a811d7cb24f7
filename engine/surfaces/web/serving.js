// vramwise serve: the page's serving mode (a serving profile such as vllm). It draws /api/fit's answer for a
// serving profile (its ServingFit): the budget in the terms of vLLM's start-up log, whether it starts and why
// not, the answers (largest max_model_len, concurrency, the gpu_memory_utilization a length needs) and the
// KV-capacity charts (by tensor_parallel_size and by gpu_memory_utilization). Loaded before app.js, which
// calls window.vramwiseServing with its own helpers.
"use strict";
window.vramwiseServing = function (lib) {
  const { $, el, h, clear, gib } = lib;
  //: the serving settings the page's serving form holds, by their names in vramwise.SETTINGS (vLLM's names)
  const FIELDS = ["vllm_version", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
    "pipeline_parallel_size", "kv_cache_dtype", "block_size", "max_num_seqs", "max_num_batched_tokens", "enforce_eager"];
  const PARTS = [["weights", "weights", "#2f5fd0"], ["profiling peak", "activation_peak", "#16a085"],
    ["outside torch", "non_torch", "#7f8c8d"], ["CUDA graphs", "cuda_graphs", "#8e44ad"], ["KV cache", "kv_cache_bytes", "#27ae60"]];
  const OK = "#1b7f3b", BAD = "#b3261e", LINE = "#2f5fd0";
  const int = (n) => n === null || n === undefined ? "none" : Math.round(n).toLocaleString("en-US");
  const share = (u) => u === null || u === undefined ? "—" : u.toFixed(2);
  const short = (n) => n >= 1e6 ? (n / 1e6).toFixed(n >= 1e7 ? 1 : 2) + "M" : n >= 1e3 ? (n / 1e3).toFixed(n >= 1e4 ? 0 : 1) + "K" : String(n);

  // the share of the GPU vLLM takes: requested / the GPU's total (the setting, or vLLM's default for the version)
  const utilization = (f) => f.gpu_memory ? f.requested / f.gpu_memory : null;

  // why vLLM refuses to start (the start-up check it fails), in its own terms
  function whyNot(fit) {
    const f = fit.figures;
    if (f.available_kv <= 0) {
      return "no memory is left for the KV cache (\"No available memory for the cache blocks\"): raise " +
        "gpu_memory_utilization, or spread the model with tensor_parallel_size";
    }
    if (f.needed_kv > f.available_kv) {
      return "one request of " + int(f.max_model_len) + " tokens needs " + gib(f.needed_kv) + " GiB of KV cache, more than the " +
        gib(f.available_kv) + " GiB available" + (fit.largest_max_model_len ? "; the largest max_model_len that starts is " +
        int(fit.largest_max_model_len) : "");
    }
    return "max_model_len is longer than the model's own context (see the warnings)";
  }

  function ranks(s) { return s.tensor_parallel_size * s.pipeline_parallel_size; }

  // the headline card: KV tokens, whether it starts, the budget as one stacked bar against the GPU
  function drawHeadline(fit, est) {
    const f = fit.figures, s = fit.settings, n = ranks(s);
    const total = $("total");
    total.textContent = int(fit.kv_cache_tokens) + " tokens of KV cache";
    total.dataset.bytes = "";
    total.dataset.tokens = String(fit.kv_cache_tokens);
    total.className = "total";
    const verdict = $("verdict");
    verdict.textContent = (fit.starts ? "vLLM starts on " : "vLLM does not start on ") + (n > 1 ? n + " x " : "") + fit.gpu.name;
    verdict.className = "verdict " + (fit.starts ? "fits" : "nofit");
    // the verdict leads (whether the server starts at all), the KV-cache tokens under it
    $("headline").classList.add("lead-verdict");
    $("headline").insertBefore(verdict, total);
    $("summary").textContent = (est ? "family " + est.family + (est.model_type ? " (" + est.model_type + ")" : "") + ", " : "") +
      "profile " + fit.profile + "; vLLM " + s.vllm_version + ", max_model_len " + int(fit.max_model_len) +
      ", tensor_parallel_size " + s.tensor_parallel_size + ", pipeline_parallel_size " + s.pipeline_parallel_size +
      ", kv_cache_dtype " + s.kv_cache_dtype + (fit.starts ? "; " + fit.max_concurrency.toFixed(2) + " requests of " +
      int(fit.max_model_len) + " tokens at once" : "; " + whyNot(fit));
    const svg = $("chart");
    clear(svg);
    const W = 620, x0 = 10;
    const used = PARTS.reduce((a, p) => a + Math.max(f[p[1]], 0), 0);
    const top = Math.max(used, f.gpu_memory) * 1.04 || 1;
    let x = x0;
    for (const [name, key, color] of PARTS) {
      const v = f[key];
      if (v <= 0) continue;
      const w = (v / top) * W;
      const r = el("rect", { x: x.toFixed(2), y: 14, width: Math.max(w, 0.5).toFixed(2), height: 40, fill: color,
        class: "bar", "data-component": name, "data-bytes": v });
      r.appendChild(el("title", {}, name + ": " + gib(v) + " GiB"));
      svg.appendChild(r);
      x += w;
    }
    const mark = (bytes, id, color, label, y) => {
      const ux = x0 + (bytes / top) * W;
      svg.appendChild(el("line", { x1: ux, x2: ux, y1: 4, y2: 66, stroke: color, "stroke-width": 2, "stroke-dasharray": "4 3", id }));
      svg.appendChild(el("text", { x: Math.max(ux - 230, 0), y }, label));
    };
    mark(f.requested, "gpu-line", fit.starts ? OK : BAD, "gpu_memory_utilization " + share(utilization(f)) + ": " + gib(f.requested) + " GiB", 78);
    if (f.requested < f.gpu_memory) mark(f.gpu_memory, "gpu-total", "#555", "the GPU " + gib(f.gpu_memory) + " GiB", 90);
    const legend = $("legend");
    clear(legend);
    for (const [name, key, color] of PARTS) {
      const li = h("li", "");
      const sw = h("i"); sw.style.background = color;
      li.appendChild(sw);
      li.appendChild(document.createTextNode(name + " " + gib(f[key]) + " GiB"));
      legend.appendChild(li);
    }
    $("per-gpu").textContent = "per GPU: vLLM runs on tensor_parallel_size x pipeline_parallel_size = " + n + " GPU" +
      (n > 1 ? "s" : "") + " of " + gib(f.gpu_memory) + " GiB";
    const tensors = $("band-tensors"), device = $("band-device");  // the two bands, as on the training page
    tensors.textContent = fit.error_band.tensors.summary;
    tensors.dataset.measured = String(fit.error_band.tensors.measured);
    device.textContent = fit.error_band.device.summary;
    device.dataset.measured = String(fit.error_band.device.covered);
    const warn = $("warnings");
    clear(warn);
    for (const w of fit.warnings) warn.appendChild(h("li", w));
  }

  // the answer in the lines of vLLM's start-up log, then what the serving fit answers
  function drawTable(fit) {
    const f = fit.figures, t = $("serving-table");
    clear(t);
    const row = (key, a, b, cls) => {
      const tr = h("tr"); tr.dataset.key = key;
      tr.appendChild(h("td", a)); tr.appendChild(h("td", b, "num" + (cls ? " " + cls : ""))); t.appendChild(tr);
    };
    row("starts", "vLLM starts", fit.starts ? "yes" : "no: " + whyNot(fit), fit.starts ? "fits" : "nofit");
    row("weights", "Model loading took (the weights on each GPU)", gib(f.weights) + " GiB");
    row("activation_peak", "torch peak memory increase (the profiling run)", gib(f.activation_peak) + " GiB");
    row("non_torch", "non-torch forward increase memory + CUDA graphs", gib(f.non_torch) + " + " + gib(f.cuda_graphs) + " GiB");
    row("available_kv", "Available KV cache memory", gib(f.available_kv) + " GiB (of " + gib(f.requested) + " GiB: the GPU's " +
      gib(f.gpu_memory) + " GiB x gpu_memory_utilization " + share(utilization(f)) + ")");
    row("kv_cache_tokens", "GPU KV cache size", int(f.kv_cache_tokens) + " tokens (" + int(f.num_gpu_blocks) + " blocks of " +
      f.block_size + " tokens)");
    row("max_concurrency", "Maximum concurrency for " + int(f.max_model_len) + " tokens per request", fit.max_concurrency.toFixed(2) + "x");
    row("largest_max_model_len", "largest max_model_len that starts", int(fit.largest_max_model_len));
    row("utilization_needed", "gpu_memory_utilization that " + int(fit.max_model_len) + " tokens need",
      fit.utilization_needed === null ? "more than 1.00" : share(fit.utilization_needed));
  }

  // a round top for a token axis of four steps (1, 2 or 5 x a power of ten a step): ticks that read as numbers
  function niceTop(most) {
    const raw = Math.max(most * 1.05, 4) / 4, p = 10 ** Math.floor(Math.log10(raw));
    return 4 * p * ([1, 2, 5, 10].find((m) => m * p >= raw));
  }

  function axes(svg, L, R, T, B, ymax, label) {
    svg.appendChild(el("line", { x1: L, x2: R, y1: B, y2: B, stroke: "#999" }));
    svg.appendChild(el("line", { x1: L, x2: L, y1: T, y2: B, stroke: "#999" }));
    for (let k = 0; k <= 4; k++) {
      const v = (ymax * k) / 4, y = B - (k / 4) * (B - T);
      svg.appendChild(el("text", { x: 4, y: y + 4 }, short(Math.round(v))));
      if (k) svg.appendChild(el("line", { x1: L, x2: R, y1: y, y2: y, stroke: "#eee" }));
    }
    svg.appendChild(el("text", { x: L + 6, y: T - 2 }, label));
  }

  // KV-cache tokens at each tensor_parallel_size (ServingFit.by_tp_size): bars, a cross where it does not start
  function drawByTp(fit) {
    const svg = $("kv-by-tp");
    clear(svg);
    const rows = fit.by_tp_size, L = 52, R = 620, T = 16, B = 186;
    const ymax = niceTop(Math.max(0, ...rows.map((r) => r.kv_cache_tokens || 0)));
    axes(svg, L, R, T, B, ymax, "KV-cache tokens");
    const slot = (R - L) / Math.max(rows.length, 1), bw = Math.min(70, slot * 0.55);
    rows.forEach((r, i) => {
      const cx = L + slot * i + slot / 2, mine = r.tensor_parallel_size === fit.settings.tensor_parallel_size;
      svg.appendChild(el("text", { x: cx - 18, y: B + 16 }, "TP " + r.tensor_parallel_size + (mine ? " (yours)" : "")));
      if (r.kv_cache_tokens === null) {
        const t = el("text", { x: cx - 4, y: B - 6, fill: BAD, class: "nofit-mark", "data-tp": r.tensor_parallel_size }, "✕");
        t.appendChild(el("title", {}, r.problem || "vLLM does not start at tensor_parallel_size " + r.tensor_parallel_size));
        svg.appendChild(t);
        return;
      }
      const hgt = (r.kv_cache_tokens / ymax) * (B - T);
      const bar = el("rect", { x: cx - bw / 2, y: (B - hgt).toFixed(2), width: bw, height: Math.max(hgt, 0.5).toFixed(2),
        fill: mine ? "#27ae60" : "#9fd8b4", class: "tp-bar", "data-tp": r.tensor_parallel_size, "data-tokens": r.kv_cache_tokens });
      bar.appendChild(el("title", {}, "tensor_parallel_size " + r.tensor_parallel_size + ": " + int(r.kv_cache_tokens) +
        " tokens; largest max_model_len " + int(r.largest_max_model_len)));
      svg.appendChild(bar);
      svg.appendChild(el("text", { x: cx - bw / 2, y: B - hgt - 4 }, short(r.kv_cache_tokens)));
    });
  }

  // KV-cache tokens at each gpu_memory_utilization (ServingFit.by_utilization): a line, each point green where
  // vLLM starts, the share set now and the share max_model_len needs marked
  function drawByUtilization(fit) {
    const svg = $("kv-by-util");
    clear(svg);
    const rows = fit.by_utilization || [], L = 52, R = 620, T = 16, B = 200;
    if (!rows.length) return;
    const u0 = rows[0].gpu_memory_utilization, u1 = rows[rows.length - 1].gpu_memory_utilization;
    const ymax = niceTop(Math.max(0, ...rows.map((r) => r.kv_cache_tokens)));
    const X = (u) => L + (u1 > u0 ? (u - u0) / (u1 - u0) : 0.5) * (R - L), Y = (t) => B - (t / ymax) * (B - T);
    axes(svg, L, R, T, B, ymax, "KV-cache tokens");
    rows.forEach((r, i) => { if (i % 2 === 0) svg.appendChild(el("text", { x: X(r.gpu_memory_utilization) - 10, y: B + 16 }, share(r.gpu_memory_utilization))); });
    svg.appendChild(el("text", { x: R - 140, y: B + 34 }, "gpu_memory_utilization"));
    svg.appendChild(el("polyline", { points: rows.map((r) => X(r.gpu_memory_utilization) + "," + Y(r.kv_cache_tokens)).join(" "),
      fill: "none", stroke: LINE, "stroke-width": 2, class: "util-line" }));
    const vline = (u, id, color, label, y) => {
      if (u === null || u < u0 || u > u1) return;
      svg.appendChild(el("line", { x1: X(u), x2: X(u), y1: T, y2: B, stroke: color, "stroke-dasharray": "4 3", id }));
      svg.appendChild(el("text", { x: Math.min(X(u) + 4, R - 150), y }, label));
    };
    vline(fit.utilization_needed, "util-needed", OK, int(fit.max_model_len) + " tokens need " + share(fit.utilization_needed), T + 12);
    vline(utilization(fit.figures), "util-now", "#555", "yours " + share(utilization(fit.figures)), T + 26);
    for (const r of rows) {
      const c = el("circle", { cx: X(r.gpu_memory_utilization), cy: Y(r.kv_cache_tokens), r: 4, fill: r.starts ? OK : BAD,
        class: "util-point", "data-utilization": r.gpu_memory_utilization, "data-tokens": r.kv_cache_tokens, "data-starts": String(r.starts) });
      c.appendChild(el("title", {}, "gpu_memory_utilization " + share(r.gpu_memory_utilization) + ": " + int(r.kv_cache_tokens) +
        " tokens; " + (r.starts ? "starts" : "does not start")));
      svg.appendChild(c);
    }
  }

  function draw(fit, est) {
    $("serving-gpu").textContent = (ranks(fit.settings) > 1 ? ranks(fit.settings) + " x " : "") + fit.gpu.name;
    drawHeadline(fit, est);
    drawTable(fit);
    drawByTp(fit);
    drawByUtilization(fit);
  }

  return { FIELDS, draw };
};
