// Engines: what runs where (driver, port, pid or container, recipe, role, health) and the tail of
// each engine's log (GET /api/v1/engines/{id}/log).
import { h, ago, recipeLink, section } from './dom.js';

const LOG_LINES = 60;

export async function renderEngines(el, ctx) {
  const engines = (await ctx.api.get('/api/v1/engines')).data;
  el.append(h('h1', { text: 'Engines' }));
  if (!engines.length) {
    el.append(h('p', { class: 'empty', text: 'No engine runs now.' }));
    return;
  }
  const logs = await Promise.all(engines.map((e) =>
    ctx.api.get(`/api/v1/engines/${e.id}/log?lines=${LOG_LINES}`).then((a) => a.data.text, (err) => `(no log: ${err.message})`)));
  engines.forEach((e, i) => {
    el.append(section(`${e.recipe_id ?? "engine"} · ${e.role} · engine ${e.id}`,
      h('dl', { class: 'facts' },
        h('dt', { text: 'recipe' }), h('dd', {}, e.recipe_id ? recipeLink(e.recipe_id) : '—', e.revision_id ? ` (revision ${e.revision_id})` : ''),
        h('dt', { text: 'engine' }), h('dd', {}, h('code', { text: e.engine_id })),
        h('dt', { text: 'driver' }), h('dd', { text: e.driver }),
        h('dt', { text: e.container_id ? 'container' : 'pid' }), h('dd', {}, h('code', { text: String(e.container_id ?? e.pid ?? '—') })),
        h('dt', { text: 'port' }), h('dd', { text: String(e.port ?? '—') }),
        h('dt', { text: 'health' }), h('dd', { text: e.health }),
        h('dt', { text: 'started' }), h('dd', {}, ago(e.started_at))),
      h('details', { class: 'log', open: i === 0 },
        h('summary', { text: `last ${LOG_LINES} lines of its log` }),
        h('pre', { class: 'log-text', tabindex: '0', text: logs[i] || '(empty)' }))));
  });
}
