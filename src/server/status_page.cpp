// GET /: a live dashboard of the server, one self-contained page (inline CSS and JS, no external
// resources, nothing to build) so that it works offline and from the bare binary. It polls
// /metrics every second, parses the Prometheus text and draws hand-written <canvas> line charts
// of the last five minutes: KV bytes per tier and usage, queue depths, token throughput (rates of
// the counters), prefix-cache hit rate and preemptions. Below them, the engine monitor's figures
// (engine/monitor.h: KV usage per tier, fragmentation, windowed prefix-hit rate, preemptions per
// second, step time, Jain's index), a table per QoS class (queues, TTFT and TPOT p50/p99) and the
// memory controller's loops (setpoint, error, output) and knobs, or "off".
//
// Robustness the page promises (and tests/server/status_page_slow_test.cpp checks in headless
// Chromium): no JavaScript error when /metrics is slow, failing or missing metrics; a failed poll
// leaves a gap in the charts and a visible "unreachable" state, and polling goes on. The window
// title is "strata: ok" after a successful poll and render, "strata: unreachable" after a failed
// one; <body data-polls/-failures/-renders/-js-errors> count what happened, for tests.
#include "server/status_page.h"

namespace strata::server {
namespace {

constexpr std::string_view kHtml = R"STRATA_HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>strata: loading</title>
<link rel="icon" href="data:,">
<style>
:root { --bg: #f6f7f9; --card: #fff; --fg: #1d232b; --muted: #66707c; --grid: #e3e6ea; --ok: #1f9d55; --bad: #d64545; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #14171b; --card: #1d2227; --fg: #e6e9ed; --muted: #9aa4ae; --grid: #2e353c; }
}
* { box-sizing: border-box; }
body { margin: 0; padding: 16px 20px; background: var(--bg); color: var(--fg);
       font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
header { display: flex; align-items: baseline; gap: 14px; flex-wrap: wrap; margin-bottom: 12px; }
h1 { font-size: 20px; margin: 0; }
#model { color: var(--muted); }
#status { margin-left: auto; display: flex; align-items: center; gap: 8px; color: var(--muted); }
#dot { width: 10px; height: 10px; border-radius: 50%; background: var(--muted); display: inline-block; }
#dot.ok { background: var(--ok); } #dot.bad { background: var(--bad); }
#error { display: none; margin: 0 0 12px; padding: 8px 12px; border-radius: 6px; background: rgba(214,69,69,.12); color: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 10px; margin-bottom: 12px; }
.card, .chart { background: var(--card); border-radius: 8px; padding: 10px 12px; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 22px; font-weight: 600; margin-top: 2px; white-space: nowrap; }
.card .sub { color: var(--muted); font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 10px; }
.chart h2 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
.chart canvas { width: 100%; height: 170px; display: block; }
.panels { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 10px; margin-top: 10px; }
.panel table { width: 100%; border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
.panel th { color: var(--muted); font-weight: 500; text-align: right; padding: 2px 6px; }
.panel td { text-align: right; padding: 2px 6px; border-top: 1px solid var(--grid); white-space: nowrap; }
.panel th:first-child, .panel td:first-child { text-align: left; }
.panel .note { color: var(--muted); font-size: 12px; margin-top: 6px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 6px; font-size: 12px; color: var(--muted); }
.legend i { display: inline-block; width: 10px; height: 3px; margin-right: 5px; vertical-align: middle; border-radius: 2px; }
.legend b { color: var(--fg); font-weight: 600; margin-left: 4px; }
footer { margin-top: 12px; color: var(--muted); font-size: 12px; }
footer a { color: inherit; }
</style>
</head>
<body data-polls="0" data-failures="0" data-renders="0" data-js-errors="0">
<header>
  <h1>Strata</h1><span id="model"></span>
  <span id="status"><span id="dot"></span><span id="status-text">connecting…</span></span>
</header>
<div id="error"></div>
<section class="cards">
  <div class="card"><div class="label">KV usage</div><div class="value" id="c-kv">–</div><div class="sub" id="c-kv-sub">&nbsp;</div></div>
  <div class="card"><div class="label">Running</div><div class="value" id="c-running">–</div><div class="sub" id="c-queue-sub">&nbsp;</div></div>
  <div class="card"><div class="label">Generated tok/s</div><div class="value" id="c-gen">–</div><div class="sub" id="c-gen-sub">&nbsp;</div></div>
  <div class="card"><div class="label">Prefix-cache hits</div><div class="value" id="c-hit">–</div><div class="sub" id="c-hit-sub">&nbsp;</div></div>
  <div class="card"><div class="label">Preemptions</div><div class="value" id="c-pre">–</div><div class="sub" id="c-pre-sub">&nbsp;</div></div>
  <div class="card"><div class="label">Requests in flight</div><div class="value" id="c-req">–</div><div class="sub" id="c-req-sub">&nbsp;</div></div>
</section>
<section class="charts">
  <div class="chart"><h2>KV memory by tier</h2><canvas id="ch-kv-bytes"></canvas><div class="legend" id="lg-kv-bytes"></div></div>
  <div class="chart"><h2>KV usage (RAM tiers)</h2><canvas id="ch-kv-ratio"></canvas><div class="legend" id="lg-kv-ratio"></div></div>
  <div class="chart"><h2>Queue depth</h2><canvas id="ch-queue"></canvas><div class="legend" id="lg-queue"></div></div>
  <div class="chart"><h2>Throughput (tokens/s)</h2><canvas id="ch-tput"></canvas><div class="legend" id="lg-tput"></div></div>
  <div class="chart"><h2>Prefix-cache hit rate</h2><canvas id="ch-hit"></canvas><div class="legend" id="lg-hit"></div></div>
  <div class="chart"><h2>Preemptions (per second)</h2><canvas id="ch-pre"></canvas><div class="legend" id="lg-pre"></div></div>
</section>
<section class="panels">
  <div class="chart panel"><h2>Monitor <span class="note">(engine, last 30 s)</span></h2>
    <table>
      <tr><td>KV usage hot / warm / cold</td><td id="m-tier-hot">–</td><td id="m-tier-warm">–</td><td id="m-tier-cold">–</td></tr>
      <tr><td>KV blocks used / total: hot · warm</td><td id="m-blocks-hot">–</td><td id="m-blocks-warm">–</td><td></td></tr>
      <tr><td>KV blocks used / total: host · file</td><td id="m-blocks-host">–</td><td id="m-blocks-file">–</td><td></td></tr>
      <tr><td>Fragmentation (hot)</td><td id="m-frag" colspan="3">–</td></tr>
      <tr><td>Prefix-cache hit rate</td><td id="m-hit" colspan="3">–</td></tr>
      <tr><td>Preemptions per second</td><td id="m-pre" colspan="3">–</td></tr>
      <tr><td>Transfers write / read: cold tier</td><td id="m-xfer-cold-write">–</td><td id="m-xfer-cold-read">–</td><td></td></tr>
      <tr><td>Transfers write / read: remote pool</td><td id="m-xfer-remote-write">–</td><td id="m-xfer-remote-read">–</td><td></td></tr>
      <tr><td>Transfers to host / to device</td><td id="m-xfer-device-to_host">–</td><td id="m-xfer-device-to_device">–</td><td></td></tr>
      <tr><td>Step kv / compute / wait</td><td id="m-step-kv">–</td><td id="m-step-compute">–</td><td id="m-step-wait">–</td></tr>
      <tr><td>Fairness (Jain's index)</td><td id="m-jain" colspan="3">–</td></tr>
    </table>
  </div>
  <div class="chart panel"><h2>QoS classes <span class="note">(engine, last 30 s)</span></h2>
    <table>
      <tr><th>class</th><th>waiting</th><th>running</th><th>TTFT p50</th><th>TTFT p99</th><th>TPOT p50</th><th>TPOT p99</th></tr>
      <tr><td>interactive</td><td id="q-interactive-waiting">–</td><td id="q-interactive-running">–</td>
          <td id="q-interactive-ttft-p50">–</td><td id="q-interactive-ttft-p99">–</td>
          <td id="q-interactive-tpot-p50">–</td><td id="q-interactive-tpot-p99">–</td></tr>
      <tr><td>batch</td><td id="q-batch-waiting">–</td><td id="q-batch-running">–</td>
          <td id="q-batch-ttft-p50">–</td><td id="q-batch-ttft-p99">–</td>
          <td id="q-batch-tpot-p50">–</td><td id="q-batch-tpot-p99">–</td></tr>
    </table>
  </div>
  <div class="chart panel"><h2>Controller: <span id="ctl-state">–</span></h2>
    <table>
      <tr><th>loop</th><th>setpoint</th><th>error</th><th>output</th></tr>
      <tr><td>projected KV demand <span id="ctl-kv-demand">–</span></td><td id="ctl-kv-setpoint">–</td><td id="ctl-kv-error">–</td><td id="ctl-kv-output">–</td></tr>
      <tr><td>interactive TPOT p90</td><td id="ctl-tpot-setpoint">–</td><td id="ctl-tpot-error">–</td><td id="ctl-tpot-output">–</td></tr>
    </table>
    <table>
      <tr><th>knob</th><th>value</th></tr>
      <tr><td>batch reserve</td><td id="ctl-knob-batch_reserve">–</td></tr>
      <tr><td>max batched tokens</td><td id="ctl-knob-max_batched_tokens">–</td></tr>
      <tr><td>max seqs</td><td id="ctl-knob-max_seqs">–</td></tr>
      <tr><td>hot tokens</td><td id="ctl-knob-hot_tokens">–</td></tr>
    </table>
  </div>
</section>
<footer>Polls <a href="/metrics">/metrics</a> every second · last 5 minutes · <a href="/health">/health</a> · <a href="/v1/models">/v1/models</a></footer>
<script>
'use strict';
(function () {
  const POLL_MS = 1000, FETCH_TIMEOUT_MS = 2500, WINDOW_S = 300, HIT_WINDOW_S = 30;
  const body = document.body;
  const $ = (id) => document.getElementById(id);
  const bump = (attr) => { body.dataset[attr] = String(Number(body.dataset[attr] || 0) + 1); };

  // Uncaught errors are counted and shown, never silent: the page is a diagnostic tool.
  window.addEventListener('error', (e) => { bump('jsErrors'); showError('page error: ' + (e.message || e)); });
  window.addEventListener('unhandledrejection', (e) => { bump('jsErrors'); showError('page error: ' + (e.reason || e)); });

  function showError(msg) {
    const el = $('error');
    el.textContent = msg;
    el.style.display = msg ? 'block' : 'none';
  }

  // --- Prometheus text -> {name: [{labels, value}]} ------------------------------------------
  function parseLabels(s) {
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
    let m;
    while ((m = re.exec(s)) !== null) labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    return labels;
  }
  function parseValue(s) {
    if (s === 'NaN') return NaN;
    if (s === '+Inf' || s === 'Inf') return Infinity;
    if (s === '-Inf') return -Infinity;
    const v = Number(s);
    return Number.isNaN(v) ? null : v;
  }
  function parseMetrics(text) {
    const out = {};
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (!line || line[0] === '#') continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const value = parseValue(m[4]);
      if (value === null) continue;
      (out[m[1]] = out[m[1]] || []).push({ labels: m[3] ? parseLabels(m[3]) : {}, value });
    }
    return out;
  }
  // The value of `name` whose labels include `want`; null when absent.
  function get(metrics, name, want) {
    for (const s of metrics[name] || []) {
      if (!want || Object.keys(want).every((k) => s.labels[k] === want[k])) return s.value;
    }
    return null;
  }
  function first(metrics, names, want) {
    for (const n of names) { const v = get(metrics, n, want); if (v !== null) return v; }
    return null;
  }

  // --- formatting ------------------------------------------------------------------------------
  function fmtBytes(b) {
    if (b === null || !isFinite(b)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(b < 10 ? 2 : 1)) + ' ' + units[i];
  }
  function fmtNum(v, digits) {
    if (v === null || !isFinite(v)) return '–';
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (digits !== undefined) return v.toFixed(digits);
    return Number.isInteger(v) ? String(v) : String(Number(v.toFixed(Math.abs(v) < 1 ? 2 : 1)));
  }
  const fmtPct = (v) => (v === null || !isFinite(v) ? '–' : (100 * v).toFixed(1) + '%');
  // Seconds shown as milliseconds.
  function fmtMs(v) {
    if (v === null || !isFinite(v)) return '–';
    const ms = 1000 * v;
    return (ms >= 100 ? ms.toFixed(0) : ms.toFixed(1)) + ' ms';
  }

  // --- time series -----------------------------------------------------------------------------
  // Each series is [[t_ms, value|null], ...]; a null value is a gap (a failed poll, a reset counter).
  const series = {};
  function push(key, t, v) {
    const s = (series[key] = series[key] || []);
    s.push([t, v === undefined || (v !== null && !isFinite(v)) ? null : v]);
    while (s.length && s[0][0] < t - WINDOW_S * 1000) s.shift();
  }
  function last(key) {
    const s = series[key];
    return s && s.length ? s[s.length - 1][1] : null;
  }

  // --- charts ----------------------------------------------------------------------------------
  const COLORS = { hot: '#e4572e', warm: '#f3a712', cold: '#4f8fdd', running: '#1f9d55', waiting: '#f3a712',
                   swapped: '#8e6bd8', gen: '#4f8fdd', prompt: '#9aa4ae', hit: '#1f9d55', recent: '#1f9d55',
                   total: '#9aa4ae', ratio: '#e4572e', pre: '#d64545' };
  const CHARTS = [
    { id: 'kv-bytes', fmt: fmtBytes, bytes: true, lines: [['kv_hot', 'hot', COLORS.hot], ['kv_warm', 'warm', COLORS.warm], ['kv_cold', 'cold', COLORS.cold]] },
    { id: 'kv-ratio', fmt: fmtPct, max: 1, lines: [['kv_ratio', 'used', COLORS.ratio]] },
    { id: 'queue', fmt: (v) => fmtNum(v, 0), integer: true,
      lines: [['running', 'running', COLORS.running], ['waiting', 'waiting', COLORS.waiting], ['swapped', 'swapped', COLORS.swapped]] },
    { id: 'tput', fmt: (v) => fmtNum(v), lines: [['gen_rate', 'generated', COLORS.gen], ['prompt_rate', 'prompt', COLORS.prompt]] },
    { id: 'hit', fmt: fmtPct, max: 1, lines: [['hit_recent', 'last ' + HIT_WINDOW_S + ' s', COLORS.recent], ['hit_total', 'since start', COLORS.total]] },
    { id: 'pre', fmt: (v) => fmtNum(v), lines: [['pre_rate', 'preemptions/s', COLORS.pre]] },
  ];

  // A round axis maximum at or above v: 1, 2, 2.5, 5 times a power of `base` (10, or 1024 for
  // bytes, whose labels are in KiB/MiB/...); integer charts get a multiple of the 4 grid steps.
  function niceMax(v, chart) {
    if (chart.integer) return Math.max(4, Math.ceil(v / 4) * 4);
    if (!(v > 0)) return 1;
    let unit = 1;
    if (chart.bytes) while (v / unit >= 1024) unit *= 1024;
    const w = v / unit, p = Math.pow(10, Math.floor(Math.log10(w)));
    for (const m of [1, 2, 2.5, 5, 10]) if (w <= m * p * (1 + 1e-9)) return m * p * unit;
    return 10 * p * unit;
  }

  function drawChart(chart, now) {
    const canvas = $('ch-' + chart.id);
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(50, canvas.clientWidth), h = Math.max(50, canvas.clientHeight);
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const css = getComputedStyle(body);
    const grid = css.getPropertyValue('--grid').trim() || '#ddd', muted = css.getPropertyValue('--muted').trim() || '#888';
    const left = 58, right = 8, top = 6, bottom = 22, pw = w - left - right, ph = h - top - bottom;
    const t0 = now - WINDOW_S * 1000;
    let ymax = 0;
    for (const [key] of chart.lines) for (const [, v] of series[key] || []) if (v !== null && v > ymax) ymax = v;
    ymax = chart.max !== undefined ? Math.max(chart.max, ymax) : niceMax(ymax, chart);
    const x = (t) => left + ((t - t0) / (WINDOW_S * 1000)) * pw;
    const y = (v) => top + ph - (v / ymax) * ph;

    ctx.font = '11px system-ui, sans-serif';
    ctx.lineWidth = 1;
    ctx.strokeStyle = grid;
    ctx.fillStyle = muted;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4, yy = Math.round(y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(left + pw, yy); ctx.stroke();
      ctx.fillText(chart.fmt(v), left - 6, yy);
    }
    ctx.textBaseline = 'top';
    for (let m = 5; m >= 0; m--) {
      ctx.textAlign = m ? 'center' : 'right';
      ctx.fillText(m ? '-' + m + 'm' : 'now', m ? x(now - m * 60000) : left + pw, top + ph + 4);
    }

    ctx.lineWidth = 1.8;
    ctx.lineJoin = 'round';
    for (const [key, , color] of chart.lines) {
      ctx.strokeStyle = color;
      ctx.beginPath();
      let open = false, lone = null;
      for (const [t, v] of series[key] || []) {
        if (v === null || t < t0) { open = false; continue; }
        const px = x(t), py = y(Math.min(v, ymax));
        if (open) { ctx.lineTo(px, py); lone = null; } else { ctx.moveTo(px, py); lone = [px, py]; }
        open = true;
      }
      ctx.stroke();
      if (lone) { ctx.fillStyle = color; ctx.fillRect(lone[0] - 1.5, lone[1] - 1.5, 3, 3); }
    }
  }

  function drawLegend(chart, extra) {
    const el = $('lg-' + chart.id);
    el.textContent = '';
    for (const [key, label, color] of chart.lines) {
      const span = document.createElement('span');
      const sw = document.createElement('i');
      sw.style.background = color;
      const val = document.createElement('b');
      val.textContent = chart.fmt(last(key));
      span.append(sw, label, val);
      el.append(span);
    }
    if (extra) { const s = document.createElement('span'); s.textContent = extra; el.append(s); }
  }

  // --- one poll --------------------------------------------------------------------------------
  let prev = null;          // {t, gen, prompt, hit, queried, pre} of the last successful poll
  const hitWindow = [];     // [t, hit, queried] of recent polls, for the windowed hit rate
  let failingSince = null;
  let lastError = '';
  let kvCapacity = {};

  function rate(cur, before, dt) {
    if (cur === null || before === null || !(dt > 0) || cur < before) return null;  // reset: gap
    return (cur - before) / dt;
  }

  function record(m, now) {
    const ready = get(m, 'strata_model_ready');
    const kv = {};
    for (const tier of ['hot', 'warm', 'cold']) {
      kv[tier] = get(m, 'strata_kv_bytes', { tier });
      kvCapacity[tier] = get(m, 'strata_kv_capacity_bytes', { tier });
      push('kv_' + tier, now, kv[tier]);
    }
    const ratio = get(m, 'strata_kv_usage_ratio');
    push('kv_ratio', now, ratio);
    const running = get(m, 'strata_requests_running'), waiting = get(m, 'strata_requests_waiting');
    const swapped = get(m, 'strata_requests_swapped');
    push('running', now, running);
    push('waiting', now, waiting);
    push('swapped', now, swapped);

    const cur = {
      t: now,
      gen: first(m, ['strata_generation_tokens_total', 'strata_generated_tokens_total']),
      prompt: get(m, 'strata_prompt_tokens_total'),
      hit: get(m, 'strata_prefix_cache_hit_tokens_total'),
      queried: get(m, 'strata_prefix_cache_queried_tokens_total'),
      pre: get(m, 'strata_preemptions_total'),
    };
    const dt = prev ? (now - prev.t) / 1000 : 0;
    const genRate = prev ? rate(cur.gen, prev.gen, dt) : null;
    push('gen_rate', now, genRate);
    push('prompt_rate', now, prev ? rate(cur.prompt, prev.prompt, dt) : null);
    push('pre_rate', now, prev ? rate(cur.pre, prev.pre, dt) : null);
    if (prev && cur.queried !== null && prev.queried !== null && cur.queried < prev.queried) hitWindow.length = 0;
    if (cur.hit !== null && cur.queried !== null) hitWindow.push([now, cur.hit, cur.queried]);
    while (hitWindow.length > 1 && hitWindow[0][0] < now - HIT_WINDOW_S * 1000) hitWindow.shift();
    let hitRecent = null;
    if (hitWindow.length > 1) {
      const a = hitWindow[0], b = hitWindow[hitWindow.length - 1];
      if (b[2] > a[2]) hitRecent = (b[1] - a[1]) / (b[2] - a[2]);
    }
    const hitTotal = cur.queried > 0 ? cur.hit / cur.queried : null;
    push('hit_recent', now, hitRecent);
    push('hit_total', now, hitTotal);
    prev = cur;

    // Cards.
    $('c-kv').textContent = fmtPct(ratio);
    $('c-kv-sub').textContent = 'hot ' + fmtBytes(kv.hot) + ' of ' + fmtBytes(kvCapacity.hot);
    $('c-running').textContent = fmtNum(running, 0);
    $('c-queue-sub').textContent = 'waiting ' + fmtNum(waiting, 0) + ' · swapped ' + fmtNum(swapped, 0);
    $('c-gen').textContent = fmtNum(genRate);
    $('c-gen-sub').textContent = fmtNum(cur.gen, 0) + ' out · ' + fmtNum(cur.prompt, 0) + ' prompt';
    $('c-hit').textContent = fmtPct(hitRecent !== null ? hitRecent : hitTotal);
    $('c-hit-sub').textContent = (hitRecent !== null ? HIT_WINDOW_S + ' s window · ' : '') + fmtPct(hitTotal) + ' overall';
    $('c-hit-sub').title = fmtNum(cur.hit, 0) + ' of ' + fmtNum(cur.queried, 0) + ' prompt tokens found in the cache';
    $('c-pre').textContent = fmtNum(cur.pre, 0);
    $('c-pre-sub').textContent = 'total since start';
    const inFlight = get(m, 'strata_requests_in_flight');
    $('c-req').textContent = fmtNum(inFlight, 0);
    const by = (s) => get(m, 'strata_requests_total', { status: s }) || 0;
    $('c-req-sub').textContent = fmtNum(by('success'), 0) + ' done · ' + fmtNum(by('error') + by('aborted') + by('rejected'), 0) + ' failed';
    $('c-req-sub').title = by('error') + ' errors, ' + by('aborted') + ' aborted, ' + by('rejected') + ' rejected';
    renderMonitor(m);
    return ready;
  }

  // The monitor's, the QoS classes' and the controller's gauges (absent ones show '–').
  function renderMonitor(m) {
    const set = (id, text) => { $(id).textContent = text; };
    for (const tier of ['hot', 'warm', 'cold']) set('m-tier-' + tier, fmtPct(get(m, 'strata_kv_tier_usage_ratio', { tier })));
    for (const tier of ['hot', 'warm', 'host', 'file']) {
      const used = get(m, 'strata_kv_tier_blocks', { tier, state: 'used' });
      const total = get(m, 'strata_kv_tier_blocks', { tier, state: 'total' });
      const bytes = get(m, 'strata_kv_tier_bytes', { tier, state: 'used' });
      set('m-blocks-' + tier, total === null || total === undefined || total === 0 ? '–'
          : fmtNum(used, 0) + ' / ' + fmtNum(total, 0) + ' (' + fmtBytes(bytes) + ')');
    }
    set('m-frag', fmtPct(get(m, 'strata_kv_fragmentation_ratio')));
    set('m-hit', fmtPct(get(m, 'strata_prefix_cache_hit_rate')));
    set('m-pre', fmtNum(get(m, 'strata_preemptions_per_second'), 2));
    for (const [link, dirs] of [['cold', ['write', 'read']], ['remote', ['write', 'read']], ['device', ['to_host', 'to_device']]]) {
      for (const direction of dirs) {
        const v = get(m, 'strata_kv_transfer_bytes_per_second', { link, direction });
        set('m-xfer-' + link + '-' + direction, v === null ? '–' : fmtBytes(v) + '/s');
      }
    }
    for (const phase of ['kv', 'compute', 'wait']) set('m-step-' + phase, fmtMs(get(m, 'strata_engine_step_seconds', { phase })));
    set('m-jain', fmtNum(get(m, 'strata_fairness_jain_index'), 2));
    for (const qos of ['interactive', 'batch']) {
      for (const state of ['waiting', 'running']) set('q-' + qos + '-' + state, fmtNum(get(m, 'strata_qos_sequences', { qos, state }), 0));
      for (const [what, metric] of [['ttft', 'strata_qos_ttft_seconds'], ['tpot', 'strata_qos_tpot_seconds']]) {
        set('q-' + qos + '-' + what + '-p50', fmtMs(get(m, metric, { qos, quantile: '0.5' })));
        set('q-' + qos + '-' + what + '-p99', fmtMs(get(m, metric, { qos, quantile: '0.99' })));
      }
    }
    const enabled = get(m, 'strata_controller_enabled');
    set('ctl-state', enabled === null ? '–' : enabled > 0 ? 'pid' : 'off');
    const loop = (name, metric) => get(m, metric, { loop: name });
    set('ctl-kv-demand', fmtPct(get(m, 'strata_controller_kv_demand_ratio')));
    set('ctl-kv-setpoint', fmtPct(loop('kv_demand', 'strata_controller_setpoint')));
    set('ctl-kv-error', fmtNum(loop('kv_demand', 'strata_controller_error'), 3));
    set('ctl-kv-output', fmtNum(loop('kv_demand', 'strata_controller_output'), 3));
    set('ctl-tpot-setpoint', fmtMs(loop('interactive_tpot', 'strata_controller_setpoint')));
    set('ctl-tpot-error', fmtNum(loop('interactive_tpot', 'strata_controller_error'), 3));
    set('ctl-tpot-output', fmtNum(loop('interactive_tpot', 'strata_controller_output'), 3));
    const knob = (k) => get(m, 'strata_controller_knob', { knob: k });
    set('ctl-knob-batch_reserve', fmtPct(knob('batch_reserve')));
    for (const k of ['max_batched_tokens', 'max_seqs', 'hot_tokens']) set('ctl-knob-' + k, fmtNum(knob(k), 0));
  }

  function recordGap(now) {
    for (const c of CHARTS) for (const [key] of c.lines) push(key, now, null);
  }

  function render(now) {
    for (const c of CHARTS) {
      drawChart(c, now);
      const cap = c.id === 'kv-bytes' && kvCapacity.hot !== null && kvCapacity.hot !== undefined
          ? 'capacity hot ' + fmtBytes(kvCapacity.hot) + (kvCapacity.warm ? ' · warm ' + fmtBytes(kvCapacity.warm) : '') +
            (kvCapacity.cold ? ' · cold ' + fmtBytes(kvCapacity.cold) : '')
          : '';
      drawLegend(c, cap);
    }
  }

  function setStatus(ok, text) {
    $('dot').className = ok ? 'ok' : 'bad';
    $('status-text').textContent = text;
  }

  async function fetchText(url) {
    const ctl = typeof AbortController === 'function' ? new AbortController() : null;
    const timer = ctl ? setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS) : null;
    try {
      const res = await fetch(url, { cache: 'no-store', signal: ctl ? ctl.signal : undefined });
      if (!res.ok) throw new Error(url + ': HTTP ' + res.status);
      return await res.text();
    } finally {
      if (timer) clearTimeout(timer);
    }
  }

  async function poll() {
    const now = Date.now();
    bump('polls');
    let metrics = null;
    try {
      metrics = parseMetrics(await fetchText('/metrics'));
    } catch (e) {
      lastError = e && e.name === 'AbortError' ? '/metrics: no answer within ' + FETCH_TIMEOUT_MS / 1000 + ' s'
                                                : String(e && e.message ? e.message : e);
    }
    try {
      if (metrics) {
        const ready = record(metrics, now);
        failingSince = null;
        showError('');
        setStatus(true, (ready === 0 ? 'model loading · ' : 'live · ') + new Date(now).toLocaleTimeString());
        render(now);
        bump('renders');
        document.title = 'strata: ok';
      } else {
        bump('failures');
        if (failingSince === null) failingSince = now;
        prev = null;  // rates across a gap would average over it
        recordGap(now);
        setStatus(false, 'unreachable since ' + new Date(failingSince).toLocaleTimeString());
        showError('Cannot read /metrics: ' + lastError + ' (retrying every second)');
        render(now);
        document.title = 'strata: unreachable';
      }
    } catch (e) {
      bump('jsErrors');
      showError('page error: ' + (e && e.stack ? e.stack : e));
    }
    setTimeout(poll, POLL_MS);
  }

  async function loadModelName() {
    try {
      const j = JSON.parse(await fetchText('/v1/models'));
      if (j && Array.isArray(j.data) && j.data.length && typeof j.data[0].id === 'string') $('model').textContent = j.data[0].id;
    } catch (e) { /* needs the API key on protected servers: the name is optional */ }
  }

  window.addEventListener('resize', () => { try { render(Date.now()); } catch (e) { bump('jsErrors'); } });
  loadModelName();
  poll();
})();
</script>
</body>
</html>
)STRATA_HTML";

}  // namespace

std::string_view status_page_html() { return kHtml; }

}  // namespace strata::server
