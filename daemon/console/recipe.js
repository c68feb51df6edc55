// One recipe: its document and provenance, its revisions, the timeline of its transitions, the
// feasibility verdict axis by axis, and each qualification receipt (gates with reasons,
// measurements beside the control's and the thresholds). Actions: qualify, pin as the default.
import { h, ago, facts, num, section, statusBadge, table, verdictBadge, bytes } from './dom.js';
import { reasonChecks, checkList } from './overview.js';

// How a measurement is judged against the control, where a threshold applies to it.
function judged(metric, value, control, t) {
  const L = t.limits;
  if (metric === 'relative_quality_loss') return { rule: `≤ ${num(L.relative_quality_loss_at_most)}`, pass: value <= L.relative_quality_loss_at_most };
  if (control === undefined || control === null) return null;
  if (metric === 'warm_e2e_seconds' && control > 0) {
    const gain = 1 - value / control;
    return { rule: `gain ${num(gain)} ≥ ${num(L.warm_e2e_gain_at_least)}`, pass: gain >= L.warm_e2e_gain_at_least };
  }
  if (metric === 'tasks_per_hour' && control > 0) {
    const ratio = value / control;
    return { rule: `ratio ${num(ratio)} ≥ ${num(L.tasks_per_hour_ratio_at_least)}`, pass: ratio >= L.tasks_per_hour_ratio_at_least };
  }
  return null;
}

function formatValue(value, unit) {
  if (unit === 'bytes') return bytes(value);
  return `${num(value, 4)}${unit && unit !== 'ratio' ? ` ${unit}` : ''}`;
}

function receiptCard(r, thresholds, index) {
  const head = `${r.file} (revision ${r.revision_id})`;
  if (r.error) {
    return h('article', { class: 'receipt' }, h('h3', { text: head }), h('p', { class: 'error', text: r.error }),
      facts([['sha256 in the ledger', h('code', { text: r.sha256 })]]));
  }
  const control = r.control ? r.control.measurements : {};
  const rows = (r.measurements || []).map((m) => ({ ...m, control: control[m.metric], judged: judged(m.metric, m.value, control[m.metric], thresholds) }));
  return h('article', { class: 'receipt', id: `receipt-${index}` },
    h('h3', { text: head }),
    facts([
      ['verified', r.verified ? 'yes: the file has the sha256 the ledger recorded' : 'no'],
      ['sha256', h('code', { text: r.sha256 })],
      ['ran', [ago(r.started_at), ` to ${r.finished_at}`]],
      ['hard gates', verdictBadge(Boolean(r.hard_gates_passed))],
      ['control', r.control ? `${r.control.recipe_id ?? '?'} (revision ${r.control.revision_id})` : 'none: no default when it was qualified'],
      r.quality ? ['quality', `relative loss ${num(r.quality.relative_quality_loss)}, mean KL ${num(r.quality.mean_kl)} nats, top-1 agreement ${num(r.quality.top1_agreement)} over ${r.quality.positions} positions`] : null,
    ]),
    h('h4', { text: 'Gates' }),
    table([
      ['gate', (g) => g.gate],
      ['result', (g) => verdictBadge(Boolean(g.pass))],
      ['passed', (g) => `${g.passed} of ${g.attempts}`],
      ['reasons', (g) => (g.reasons && g.reasons.length ? h('ul', {}, g.reasons.map((x) => h('li', { text: x }))) : '—')],
    ], r.gates || [], { className: 'gates' }),
    h('h4', { text: 'Measurements' }),
    table([
      ['metric', (m) => m.metric],
      ['this recipe', (m) => formatValue(m.value, m.unit)],
      ['control', (m) => (m.control === undefined ? '—' : formatValue(m.control, m.unit))],
      ['threshold', (m) => (m.judged ? m.judged.rule : '—')],
      ['result', (m) => (m.judged ? verdictBadge(m.judged.pass) : '—')],
    ], rows, { className: 'measurements' }),
    r.notes && r.notes.length ? [h('h4', { text: 'Notes' }), h('ul', {}, r.notes.map((n) => h('li', {}, h('strong', { text: n.label }), `: ${n.text}`)))] : null);
}

export async function renderRecipe(el, ctx, id) {
  const enc = encodeURIComponent(id);
  const [detail, receipts] = await Promise.all([ctx.api.get(`/api/v1/recipes/${enc}`), ctx.api.get(`/api/v1/recipes/${enc}/receipts`)]);
  const d = detail.data;
  const newest = d.revisions[0];
  el.append(h('h1', {}, id, ' ', statusBadge(d.status)));
  el.append(h('div', { class: 'buttons' },
    h('button', { type: 'button', id: 'action-pin', onclick: () => ctx.act(`Pin ${id}`, '/api/v1/default', { recipe_id: id }).catch(() => {}) }, 'Pin as the default'),
    h('button', { type: 'button', id: 'action-qualify', onclick: () => ctx.act(`Qualify ${id}`, `/api/v1/recipes/${enc}/qualify`).catch(() => {}) }, 'Qualify again')));

  el.append(section('Provenance',
    facts([
      ['source', h('code', { text: newest.source })],
      ['commit', h('code', { text: newest.commit })],
      ['path', h('code', { text: newest.path })],
      ['blob', h('code', { text: newest.blob })],
      ['sha256', h('code', { text: newest.sha256 })],
      ['pinned', newest.pinned ? 'yes: image and models pinned by digest' : `no: ${newest.unpinned_reasons.join('; ')}`],
      ['engine', `${newest.engine} (${newest.launch_kind}) on ${newest.hardware_id}`],
    ])));

  el.append(section('Revisions',
    table([
      ['revision', (r) => r.revision_id],
      ['status', (r) => statusBadge(r.status)],
      ['commit', (r) => h('code', { text: r.commit.slice(0, 12), title: r.commit })],
      ['sha256', (r) => h('code', { text: r.sha256.slice(0, 12), title: r.sha256 })],
      ['seen', (r) => ago(r.created_at)],
    ], d.revisions)));

  el.append(section('Timeline',
    h('ol', { class: 'timeline', id: 'timeline' }, [...d.history].reverse().map((t) => {
      const { head, checks } = reasonChecks(t.reason);
      return h('li', {},
        h('div', { class: 'when' }, ago(t.created_at)),
        h('div', {}, statusBadge(t.from ?? 'new'), ' → ', statusBadge(t.to), ` revision ${t.revision_id}, by `, h('strong', { text: t.actor })),
        h('div', { class: 'reason', text: checks.length ? head : t.reason }),
        checks.length ? checkList(checks) : null);
    }))));

  const f = d.feasibility;
  const storedVerdict = d.verdicts.filter((v) => v.gate === 'feasibility' && v.revision_id === newest.revision_id).pop();
  el.append(section('Feasibility on paper',
    f ? [
      facts([
        ['verdict', [verdictBadge(storedVerdict ? storedVerdict.result : Object.values(f.gates || {}).some((g) => g.status === 'fail') ? 'fail' : 'pass'), ` ${f.class ?? ''}`]],
        ['reasons', h('ul', {}, (f.reasons || []).map((x) => h('li', { text: x })))],
        ['promotable', f.promotable ? 'yes' : `no${(f.promotion_blockers || []).length ? `: ${f.promotion_blockers.join('; ')}` : ''}`],
      ]),
      table([
        ['axis', ([name]) => name],
        ['result', ([, g]) => verdictBadge(g.status)],
        ['reason', ([, g]) => g.reason],
      ], Object.entries(f.gates || {}), { className: 'axes' }),
    ] : storedVerdict ? facts([['verdict', verdictBadge(storedVerdict.result)], ['reasons', h('ul', {}, storedVerdict.reasons.map((x) => h('li', { text: x })))]])
      : h('p', { class: 'empty', text: 'not judged yet' })));

  const rs = receipts.data.receipts;
  el.append(section('Qualification receipts',
    rs.length ? rs.map((r, i) => receiptCard(r, receipts.data.thresholds, i)) : h('p', { class: 'empty', text: 'not qualified yet' })));

  el.append(section('Document',
    h('details', {}, h('summary', { text: `${newest.path} at ${newest.commit.slice(0, 12)}` }),
      h('pre', { class: 'document', text: JSON.stringify(d.document, null, 2) }))));
}
