// attncli serve: the page. Talks to /v1/model and /v1/translate of the server that sent it.
// Every text from a request or a model (sentences, subword pieces) goes into the page as text
// (textContent, element values), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "attncli-api-key";
const state = { model: null, runs: [], result: null, sentences: [], kind: "cross", sentence: 0 };

// viridis, as the PNG heatmaps of `attncli translate --attention-png` use
const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function colour(weight) {
  const x = Math.min(Math.max(weight, 0), 1) * (STOPS.length - 1);
  const i = Math.min(Math.floor(x), STOPS.length - 2);
  const f = x - i;
  const rgb = STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c)));
  return `rgb(${rgb.join(",")})`;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function setStatus(message, isError) {
  $("status").textContent = message;
  $("status").classList.toggle("error", Boolean(isError));
}

function headers() {
  const result = { "Content-Type": "application/json" };
  const key = $("key").value || sessionStorage.getItem(KEY_STORE);
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

// One run: /v1/model describes it. Several: each is under "runs", and the pair chooser picks
// the one requests go to (its source and target are sent with each request).
function showRun(run, served) {
  state.model = { ...run, limits: served.limits, api_key_required: served.api_key_required };
  const model = state.model;
  const bleu = model.validation_bleu === null ? "" : `, val BLEU ${model.validation_bleu.toFixed(1)}`;
  $("model").textContent = `${model.run} · ${model.checkpoint}${bleu} · ` +
    `${(model.parameters / 1e6).toFixed(1)}M parameters · ${model.engine} on ${model.device}`;
  $("source-lang").textContent = model.languages.source;
  $("target-lang").textContent = model.languages.target;
  $("beam").value = model.beam;
  $("beam").max = Math.max(model.limits.max_beam, model.beam);
}

async function loadModel() {
  const response = await fetch("/v1/model");
  const served = await response.json();
  state.runs = served.runs || [served];
  const pair = $("pair");
  pair.replaceChildren(...state.runs.map((run, i) => {
    const option = el("option", `${run.languages.source} → ${run.languages.target}`);
    option.value = String(i);
    return option;
  }));
  $("pair-row").hidden = state.runs.length < 2;
  pair.onchange = () => showRun(state.runs[Number(pair.value)], served);
  showRun(state.runs[0], served);
  if (served.api_key_required) $("key-row").hidden = false;
  $("key").value = sessionStorage.getItem(KEY_STORE) || "";
}

async function translate() {
  // the box as one text: the server splits it into sentences and keeps its paragraphs
  const source = $("source").value;
  if (!source.trim()) { setStatus("Type a sentence first.", true); return; }
  const texts = [source];
  const nbest = Math.max(1, Number($("nbest").value) || 1);
  const beam = Math.max(nbest, Number($("beam").value) || state.model.beam);
  const body = { text: texts, beam, n_best: nbest, attention: state.model.attention,
    source: state.model.languages.source, target: state.model.languages.target };
  $("translate").disabled = true;
  setStatus("Translating…");
  const started = performance.now();
  try {
    const response = await fetch("/v1/translate",
      { method: "POST", headers: headers(), body: JSON.stringify(body) });
    const answer = await response.json();
    if (!response.ok) {
      if (response.status === 403) {
        $("key-row").hidden = false;
        $("key").focus();
      }
      setStatus(answer.error || `error ${response.status}`, true);
      return;
    }
    if ($("key").value) sessionStorage.setItem(KEY_STORE, $("key").value);
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    state.result = answer;
    state.sentences = answer.translations.flatMap((t) => t.sentences);
    state.sentence = 0;
    const count = state.sentences.length;
    setStatus(`${count} sentence${count > 1 ? "s" : ""}, beam ${beam}, ${seconds} s`);
    history.replaceState(null, "", `?q=${encodeURIComponent(source)}`);
    showOutput(answer);
    showAttention();
  } catch (err) {
    setStatus(`The server did not answer (${err.message}).`, true);
  } finally {
    $("translate").disabled = false;
  }
}

// The joined translation with its paragraphs as typed; with n-best, each sentence's list.
function showOutput(answer) {
  const out = $("output");
  out.replaceChildren();
  for (const text of answer.translations) {
    const line = el("div", undefined, "line");
    line.append(el("div", text.hypotheses[0].text, "best"));
    for (const sentence of text.sentences) {
      if (sentence.hypotheses.length < 2) continue;
      if (text.sentences.length > 1) line.append(el("div", sentence.source, "sentence-source"));
      const list = el("ol", undefined, "nbest");
      for (const h of sentence.hypotheses) {
        const item = el("li", h.text);
        item.append(el("span", h.score.toFixed(3), "score"));
        list.append(item);
      }
      line.append(list);
    }
    out.append(line);
  }
}

function fillSelect(select, options, chosen) {
  select.replaceChildren(...options.map(([value, label]) => {
    const option = el("option", label);
    option.value = value;
    return option;
  }));
  select.value = String(chosen);
}

function showAttention() {
  const panel = $("attention");
  const sentence = state.result && state.sentences[state.sentence];
  if (!state.model.attention || !sentence || !sentence.attention) { panel.hidden = true; return; }
  panel.hidden = false;
  const count = state.sentences.length;
  $("sentence-row").hidden = count < 2;
  fillSelect($("sentence"), state.sentences.map((s, i) => [i, `${i + 1}: ${s.source}`]),
    state.sentence);
  const layers = state.kind === "encoder" ? state.model.layers.encoder : state.model.layers.decoder;
  const layer = Math.min(Number($("layer").value || layers - 1), layers - 1);
  fillSelect($("layer"), [...Array(layers).keys()].map((i) => [i, `${i}${i === layers - 1 ? " (last)" : ""}`]),
    Number.isNaN(layer) ? layers - 1 : layer);
  const head = $("head").value || "mean";
  fillSelect($("head"), [["mean", "mean of heads"],
    ...[...Array(state.model.heads).keys()].map((i) => [i, `head ${i}`])], head);
  drawHeatmap();
}

function labels(sentence) {
  const out = sentence.hypotheses[0].pieces;
  if (state.kind === "encoder") return { rows: sentence.source_pieces, cols: sentence.source_pieces };
  if (state.kind === "decoder") return { rows: out, cols: sentence.attention.decoder_input };
  return { rows: out, cols: sentence.source_pieces };
}

const CAPTIONS = {
  cross: "Rows: each output piece as it is produced; columns: the source pieces it attends to.",
  encoder: "Rows and columns: source pieces; each row is how one piece's encoding mixes the others.",
  decoder: "Rows: each output piece as it is produced; columns: what the decoder has read so far " +
           "(<s> and the output before it).",
};

function weightsOf(sentence) {
  const heads = sentence.attention[state.kind][Number($("layer").value)];
  const head = $("head").value;
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, r) => row.map((_, c) =>
    heads.reduce((sum, h) => sum + h[r][c], 0) / heads.length));
}

function drawHeatmap() {
  const sentence = state.sentences[state.sentence];
  const { rows, cols } = labels(sentence);
  const weights = weightsOf(sentence);
  const which = $("head").value === "mean" ? "mean of heads" : `head ${$("head").value}`;
  $("caption").textContent = `Layer ${$("layer").value}, ${which}. ${CAPTIONS[state.kind]}`;
  const table = $("heatmap");
  // cells as large as the width allows (readable labels and numbers), from 26 to 48 px
  const room = $("attention").clientWidth - 160;
  table.style.setProperty("--cell", `${Math.max(26, Math.min(48, Math.floor(room / cols.length) - 2))}px`);
  const head = el("tr");
  head.append(el("th"));
  for (const piece of cols) {
    const th = el("th", undefined, "col");
    th.append(el("span", piece));
    head.append(th);
  }
  const thead = el("thead");
  thead.append(head);
  const tbody = el("tbody");
  rows.forEach((piece, r) => {
    const tr = el("tr");
    tr.append(el("th", piece, "row"));
    cols.forEach((col, c) => {
      const w = weights[r][c];
      const td = el("td", w >= 0.005 ? String(Math.round(100 * w)) : "", "cell");
      td.style.background = colour(w);
      td.style.color = w > 0.55 ? "#10131a" : "#f2f4f8";
      td.dataset.weight = w.toFixed(3);
      td.dataset.row = r;
      td.dataset.col = c;
      td.title = `${piece} → ${col}: ${(100 * w).toFixed(1)} %`;
      tr.append(td);
    });
    tbody.append(tr);
  });
  table.replaceChildren(thead, tbody);
}

function hover(event) {
  const td = event.target.closest("td.cell");
  for (const th of $("heatmap").querySelectorAll("th.hot")) th.classList.remove("hot");
  if (!td) return;
  const r = Number(td.dataset.row);
  const c = Number(td.dataset.col);
  const rowHead = $("heatmap").tBodies[0].rows[r].cells[0];
  const colHead = $("heatmap").tHead.rows[0].cells[c + 1];
  rowHead.classList.add("hot");
  colHead.classList.add("hot");
  $("readout").textContent = `${rowHead.textContent} → ${colHead.textContent}: ` +
    `${(100 * Number(td.dataset.weight)).toFixed(1)} %`;
}

function pickKind(event) {
  const tab = event.target.closest(".tab");
  if (!tab) return;
  state.kind = tab.dataset.kind;
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === tab);
  showAttention();
}

async function start() {
  $("translate").addEventListener("click", translate);
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
  });
  $("layer").addEventListener("change", drawHeatmap);
  $("head").addEventListener("change", drawHeatmap);
  $("sentence").addEventListener("change", () => {
    state.sentence = Number($("sentence").value);
    showAttention();
  });
  document.querySelector(".tabs").addEventListener("click", pickKind);
  $("heatmap").addEventListener("mouseover", hover);
  try {
    await loadModel();
  } catch (err) {
    setStatus(`Could not read the model (${err.message}).`, true);
    return;
  }
  const q = new URLSearchParams(location.search).get("q");
  if (q) {
    $("source").value = q;
    if (!state.model.api_key_required || $("key").value) translate();
    else setStatus("This server needs an API key: type it, then Translate.", true);
  }
}

document.addEventListener("DOMContentLoaded", start);
