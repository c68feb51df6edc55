// Overview: the default and why, the promotion policy and what it holds, the stable endpoint,
// conditions, engines, the GPU inventory, the last pass, counts by status, and the live feed.
import { h, ago, conditionBadge, facts, num, recipeLink, section, statusBadge, table, bytes } from './dom.js';

// A promotion's reason is its checks joined by "; " after the first ": ".
export function reasonChecks(reason) {
  const colon = reason.indexOf(': ');
  if (colon < 0 || !reason.includes(';')) return { head: reason, checks: [] };
  return { head: reason.slice(0, colon), checks: reason.slice(colon + 2).split('; ') };
}

export function checkList(checks) {
  return h('ul', { class: 'checks' }, checks.map((c) => {
    const m = /: (pass|fail)$/.exec(c);
    return h('li', { class: m ? `check-${m[1]}` : '' }, m ? [h('span', { class: `badge badge-${m[1]}`, text: m[1] }), ' ', c.slice(0, m.index)] : c);
  }));
}

export async function renderOverview(el, ctx) {
  const [status, def, decisions, engines, inventory] = await Promise.all([
    ctx.api.get('/api/v1/status'),
    ctx.api.get('/api/v1/default'),
    ctx.api.get('/api/v1/decisions'),
    ctx.api.get('/api/v1/engines'),
    ctx.api.get('/api/v1/inventory'),
  ]);
  const d = def.data;
  const policy = status.policy;
  el.append(h('h1', { text: 'Overview' }));

  // ---- the default, and why
  const why = d && d.reason ? reasonChecks(d.reason) : null;
  el.append(section('Default',
    d ? [
      h('p', { class: 'default-line' }, h('strong', { id: 'default-recipe' }, recipeLink(d.recipe_id)), ` revision ${d.revision_id}`,
        d.pinned ? h('span', { class: 'badge badge-pinned', text: 'pinned' }) : null),
      facts([
        ['since', ago(d.since)],
        ['chosen by', d.actor || '—'],
        ['why', why ? why.head : '—'],
      ]),
      why && why.checks.length ? checkList(why.checks) : null,
    ] : h('p', { id: 'default-recipe', class: 'empty', text: 'No default yet: nothing has been validated and promoted.' }),
    h('div', { class: 'buttons' },
      policy.pinned ? h('button', { type: 'button', onclick: () => ctx.act('Release the pin', '/api/v1/default', { recipe_id: null }).catch(() => {}) }, `Release the pin on ${policy.pinned}`) : null,
      policy.frozen
        ? h('button', { type: 'button', onclick: () => ctx.act('Unfreeze promotion', '/api/v1/promotion/unfreeze').catch(() => {}) }, 'Unfreeze promotion')
        : h('button', { type: 'button', onclick: () => ctx.act('Freeze promotion', '/api/v1/promotion/freeze', { reason: 'frozen from the console' }).catch(() => {}) }, 'Freeze promotion'),
      h('button', { type: 'button', onclick: () => ctx.act('Registry sync', '/api/v1/registry/sync').catch(() => {}) }, 'Sync the registry now'))));

  // ---- promotion
  const choice = decisions.data.choice;
  const t = decisions.data.thresholds;
  el.append(section('Promotion',
    facts([
      ['policy', policy.mode],
      ['frozen', policy.frozen ? `yes: ${policy.freeze ? policy.freeze.reason : ''}` : 'no'],
      ['pinned', policy.pinned || 'no'],
      ['this pass', `${choice.condition}: ${choice.reason}`],
      ['thresholds', `quality loss ≤ ${num(t.limits.relative_quality_loss_at_most)}, warm e2e gain ≥ ${num(t.limits.warm_e2e_gain_at_least)}, ` +
        `tasks/h ratio ≥ ${num(t.limits.tasks_per_hour_ratio_at_least)} (margin ${num(t.margin)} included)`],
    ]),
    h('p', {}, h('a', { href: '#/decisions', text: 'Every candidate against the default' }))));

  // ---- stable endpoint and engines
  const up = status.endpoint.upstream;
  el.append(section('Stable endpoint',
    facts([
      ['address', h('code', { text: status.endpoint.address })],
      ['upstream', up ? [recipeLink(up.recipe_id), ` (engine ${up.engine_id}, port ${up.port})`] : 'none: no default engine serves'],
    ])));

  el.append(section('Conditions',
    table([
      ['type', (c) => c.type],
      ['status', (c) => conditionBadge(c.status === 'True')],
      ['reason', (c) => c.reason],
      ['message', (c) => c.message],
      ['since', (c) => ago(c.since)],
    ], status.conditions, { empty: 'no conditions yet', className: 'conditions' })));

  el.append(section('Engines',
    table([
      ['recipe', (e) => (e.recipe_id ? recipeLink(e.recipe_id) : '—')],
      ['role', (e) => e.role],
      ['driver', (e) => e.driver],
      ['port', (e) => e.port ?? '—'],
      ['health', (e) => e.health],
      ['started', (e) => ago(e.started_at)],
    ], engines.data, { empty: 'no engine runs' }),
    h('p', {}, h('a', { href: '#/engines', text: 'Engines and their logs' }))));

  // ---- inventory
  const now = inventory.data.measured_now || {};
  const judging = inventory.data.judging_with || {};
  el.append(section('GPU inventory',
    facts([
      ['NVML now', now.available ? `${(now.gpus || []).length} GPU(s), driver ${now.driver_version}` : `no GPU reading${now.error ? `: ${now.error}` : ''}`],
      ['feasibility judges with', judging.source || '—'],
    ]),
    now.available ? table([
      ['index', (g) => g.index],
      ['name', (g) => g.name],
      ['memory', (g) => `${bytes(g.free_bytes)} free of ${bytes(g.total_bytes)}`],
      ['compute capability', (g) => g.compute_capability],
      ['uuid', (g) => h('code', { text: g.uuid })],
    ], now.gpus || []) : null));

  // ---- last pass and counts
  const pass = status.last_pass;
  el.append(section('Reconcile',
    facts([
      ['last pass', pass ? [ago(pass.finished_at), pass.seconds !== undefined ? ` (${num(pass.seconds * 1000)} ms)` : ''] : 'not yet'],
      ['qualifying now', status.qualifying ?? 'nothing'],
    ]),
    h('ul', { class: 'counts', 'aria-label': 'recipes by status' },
      Object.entries(status.recipes).map(([s, n]) =>
        h('li', {}, h('a', { href: `#/recipes?status=${s}` }, statusBadge(s), ` ${n}`))))));

  // ---- live feed
  const feed = h('ol', { class: 'feed', id: 'feed', 'aria-live': 'polite', reversed: true });
  const draw = () => {
    feed.replaceChildren(...[...ctx.live.recent].reverse().slice(0, 30).map((item) =>
      h('li', { class: `feed-${item.kind}` },
        ago(item.created_at), ' ', h('span', { class: 'kind', text: item.kind }), ' ',
        item.subject ? [h('strong', { text: item.subject }), ': '] : null, item.message)));
  };
  draw();
  ctx.onEvents(draw);
  el.append(section('Live', feed.childElementCount ? feed : [h('p', { class: 'empty', text: 'nothing has happened yet' }), feed]));
}
