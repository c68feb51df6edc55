// Decisions: every validated revision placed by its warm e2e gain against the default (the
// control) and its relative quality loss, with the threshold lines, the default and what is held
// back marked (the reason on hover, and in the table beside it); then per-metric comparisons.
// Numbers and decisions come from GET /api/v1/decisions, which asks the same rules promotion does.
import { h, num, percent, recipeLink, section, table, verdictBadge, bytes } from './dom.js';
import { checkList } from './overview.js';

let charts = [];

const LOOK = {
  default: { label: 'the default (control)', pointStyle: 'star', color: '#1b5e20', radius: 11 },
  promote: { label: 'beats the default: promoted next', pointStyle: 'triangle', color: '#0d47a1', radius: 9 },
  hold: { label: 'held back', pointStyle: 'rect', color: '#8d6e00', radius: 8 },
  pass_over: { label: 'passed over', pointStyle: 'crossRot', color: '#b71c1c', radius: 9 },
};

const METRICS = [
  ['ttft_seconds', 'Time to first token', 's', 'lower is better'],
  ['decode_tokens_per_second_c1', 'Decode rate, one client', 'tokens/s', 'higher is better'],
  ['tasks_per_hour', 'Tasks per hour', 'tasks/h', 'higher is better'],
  ['peak_memory_bytes', 'Peak memory', 'bytes', 'lower is better'],
];

function chartFont() {
  const style = getComputedStyle(document.body);
  return { color: style.color, family: style.fontFamily };
}

function scatter(canvas, data) {
  const t = data.thresholds.limits;
  const points = data.candidates
    .filter((c) => c.comparison && c.comparison.warm_e2e_gain !== null && c.comparison.relative_quality_loss !== null)
    .map((c) => ({ x: c.comparison.warm_e2e_gain, y: c.comparison.relative_quality_loss, c }));
  const groups = { promote: [], hold: [], pass_over: [] };
  for (const p of points) groups[p.c.decision.action]?.push(p);
  const xs = [0, t.warm_e2e_gain_at_least, ...points.map((p) => p.x)];
  const ys = [0, t.relative_quality_loss_at_most, ...points.map((p) => p.y)];
  const pad = (lo, hi) => { const d = (hi - lo || 0.1) * 0.15; return [lo - d, hi + d]; };
  const [x0, x1] = pad(Math.min(...xs), Math.max(...xs));
  const [y0, y1] = pad(Math.min(0, ...ys), Math.max(...ys));
  const font = chartFont();
  const datasets = [];
  if (data.control) {
    datasets.push({ ...style(LOOK.default), data: [{ x: 0, y: 0, c: { ...data.control, isDefault: true } }] });
  }
  for (const [action, list] of Object.entries(groups)) if (list.length) datasets.push({ ...style(LOOK[action]), data: list });
  datasets.push({ type: 'line', label: `gain threshold ${num(t.warm_e2e_gain_at_least)}`, data: [{ x: t.warm_e2e_gain_at_least, y: y0 }, { x: t.warm_e2e_gain_at_least, y: y1 }],
    borderColor: '#555', borderDash: [6, 4], borderWidth: 1.5, pointRadius: 0, pointHitRadius: 0 });
  datasets.push({ type: 'line', label: `quality loss threshold ${num(t.relative_quality_loss_at_most)}`, data: [{ x: x0, y: t.relative_quality_loss_at_most }, { x: x1, y: t.relative_quality_loss_at_most }],
    borderColor: '#555', borderDash: [2, 3], borderWidth: 1.5, pointRadius: 0, pointHitRadius: 0 });
  return new window.Chart(canvas, {
    type: 'scatter',
    data: { datasets },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      scales: {
        x: { min: x0, max: x1, title: { display: true, text: 'warm e2e gain against the default: 1 − candidate ÷ default (right is faster)', color: font.color }, ticks: { color: font.color } },
        y: { min: y0, max: y1, title: { display: true, text: 'relative quality loss (down is closer to the default)', color: font.color }, ticks: { color: font.color } },
      },
      plugins: {
        legend: { labels: { color: font.color, usePointStyle: true } },
        tooltip: {
          callbacks: {
            label: (item) => {
              const c = item.raw.c;
              if (!c) return item.dataset.label;
              if (c.isDefault) return `${c.recipe_id} (revision ${c.revision_id}): the default, the control every candidate is measured against`;
              const lines = [`${c.recipe_id} (revision ${c.revision_id}): gain ${num(item.raw.x)}, quality loss ${num(item.raw.y)}`,
                `${c.decision.action.replace('_', ' ')}: ${c.decision.reason}`];
              if (!c.measured_against_default) lines.push('its quality was measured against another default');
              return lines;
            },
          },
        },
      },
    },
  });
}

function style(look) {
  return { label: look.label, pointStyle: look.pointStyle, backgroundColor: look.color, borderColor: look.color, pointRadius: look.radius, pointHoverRadius: look.radius + 3 };
}

// Recipe ids of one family share a long prefix ("anvil-tiny-llama-"): the bars show what differs.
function shortNames(ids) {
  if (ids.length < 2) return ids;
  let n = 0;
  while (ids.every((id) => id[n] !== undefined && id[n] === ids[0][n])) ++n;
  const cut = ids[0].lastIndexOf('-', n - 1) + 1;
  return ids.map((id) => (cut > 0 && id.length > cut ? `…${id.slice(cut)}` : id));
}

function bars(canvas, rows, metric, unit) {
  const font = chartFont();
  const names = shortNames(rows.map((r) => r.recipe_id));
  return new window.Chart(canvas, {
    type: 'bar',
    data: {
      labels: rows.map((r, i) => (r.isDefault ? `${names[i]} (default)` : names[i])),
      datasets: [{ label: unit, data: rows.map((r) => r.metrics[metric] ?? null), backgroundColor: rows.map((r) => (r.isDefault ? '#1b5e20' : '#0d47a1')) }],
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      indexAxis: 'y',
      plugins: { legend: { display: false }, tooltip: { callbacks: { label: (item) => `${unit === 'bytes' ? bytes(item.raw) : num(item.raw, 4)} ${unit === 'bytes' ? '' : unit}` } } },
      scales: { x: { ticks: { color: font.color }, title: { display: true, text: unit, color: font.color } }, y: { ticks: { color: font.color } } },
    },
  });
}

export async function renderDecisions(el, ctx) {
  for (const c of charts) c.destroy();
  charts = [];
  const answer = await ctx.api.get('/api/v1/decisions');
  const data = answer.data;
  const t = data.thresholds;
  el.append(h('h1', { text: 'Decisions' }));
  el.append(h('p', {}, `A candidate replaces the default when its relative quality loss is at most ${num(t.limits.relative_quality_loss_at_most)}, `
    + `its warm e2e gain at least ${num(t.limits.warm_e2e_gain_at_least)} and its tasks-per-hour ratio at least ${num(t.limits.tasks_per_hour_ratio_at_least)} `
    + `(thresholds ${num(t.max_relative_quality_loss)}, ${num(t.min_warm_e2e_gain)}, ${num(t.min_tasks_per_hour_ratio)} with margin ${num(t.margin)}). `
    + `This pass: ${data.choice.condition}, ${data.choice.reason}`));

  if (!window.Chart) el.append(h('p', { class: 'error', text: 'Chart.js did not load: the charts are missing, the tables below say the same.' }));
  const canvas = h('canvas', { id: 'decision-chart', role: 'img', 'aria-label': 'candidates by warm e2e gain and relative quality loss; the table below lists the same' });
  el.append(section('Gain and quality against the default', h('div', { class: 'chart chart-scatter' }, canvas)));
  if (window.Chart) charts.push(scatter(canvas, data));

  const rows = data.candidates;
  el.append(section('Every validated revision',
    data.control ? h('p', {}, 'The default: ', recipeLink(data.control.recipe_id), ` (revision ${data.control.revision_id})`,
      data.control.promoted ? `, promoted ${data.control.promoted.at} by ${data.control.promoted.actor}` : '') : h('p', { text: 'No default yet.' }),
    table([
      ['recipe', (c) => [recipeLink(c.recipe_id), ` (revision ${c.revision_id})`]],
      ['warm e2e gain', (c) => (c.comparison ? num(c.comparison.warm_e2e_gain) : '—')],
      ['quality loss', (c) => (c.comparison ? num(c.comparison.relative_quality_loss) : num(c.metrics.relative_quality_loss))],
      ['tasks/h ratio', (c) => (c.comparison ? num(c.comparison.tasks_per_hour_ratio) : '—')],
      ['hard gates', (c) => verdictBadge(c.hard_gates_passed)],
      ['decision', (c) => h('span', { class: `decision decision-${c.decision.action}`, text: c.decision.action.replace('_', ' ') })],
      ['why', (c) => [h('span', { text: c.decision.reason }), c.decision.checks.length > 1 ? checkList(c.decision.checks) : null]],
    ], rows, { empty: 'no validated revision waits: nothing to compare with the default', className: 'decisions' })));

  // ---- per metric: the default and every candidate side by side
  const all = [...(data.control ? [{ ...data.control, isDefault: true }] : []), ...rows];
  const grid = h('div', { class: 'metric-grid' });
  for (const [metric, title, unit, better] of METRICS) {
    const c = h('canvas', { role: 'img', 'aria-label': `${title} of each revision; the table below lists the same` });
    grid.append(h('figure', { class: 'chart chart-bars' }, h('figcaption', { text: `${title} (${better})` }), h('div', { class: 'chart-box' }, c)));
    if (window.Chart && all.length) charts.push(bars(c, all, metric, unit));
  }
  el.append(section('Per metric', grid,
    table([
      ['recipe', (r) => (r.isDefault ? [recipeLink(r.recipe_id), ' (default)'] : recipeLink(r.recipe_id))],
      ...METRICS.map(([metric, title, unit]) => [title, (r) => (r.metrics[metric] === undefined ? '—' : unit === 'bytes' ? bytes(r.metrics[metric]) : `${num(r.metrics[metric], 4)} ${unit}`)]),
      ['draft acceptance', (r) => (r.metrics.draft_acceptance_ratio === undefined ? '—' : percent(r.metrics.draft_acceptance_ratio))],
    ], all, { className: 'metrics' })));
}
