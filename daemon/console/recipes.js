// Recipes: the API's filters (status, engine, hardware, pinned, verdict, text), sorting and paging,
// all done by anvild (GET /api/v1/recipes), so a registry of 10,000 recipes costs one page.
// The page's state lives in the URL (#/recipes?status=…&sort=-status&offset=50): it can be linked.
import { h, recipeLink, statusBadge } from './dom.js';

const STATUSES = ['candidate', 'qualifying', 'validated', 'promoted', 'retired', 'rejected', 'failed'];
const COLUMNS = [
  ['id', 'recipe', 'id'],
  ['status', 'status', 'status'],
  ['engine', 'engine', 'engine'],
  ['hardware', 'hardware', 'hardware_id'],
  ['verdict', 'verdict on paper', 'verdict'],
];
const FILTERS = ['status', 'engine', 'hardware', 'pinned', 'verdict', 'q'];
const PAGE_SIZES = [25, 50, 100, 250];

function go(params) {
  for (const [k, v] of [...params]) if (v === '') params.delete(k);
  location.hash = `#/recipes${params.toString() ? `?${params}` : ''}`;
}

export async function renderRecipes(el, ctx, params) {
  const limit = PAGE_SIZES.includes(Number(params.get('limit'))) ? Number(params.get('limit')) : 50;
  const offset = Math.max(0, Number(params.get('offset')) || 0);
  const sort = params.get('sort') || 'id';
  const query = new URLSearchParams();
  for (const f of FILTERS) if (params.get(f)) query.set(f, params.get(f));
  query.set('sort', sort);
  query.set('limit', String(limit));
  query.set('offset', String(offset));
  const page = await ctx.api.get(`/api/v1/recipes?${query}`);
  const total = page.meta.total;

  el.append(h('h1', { text: 'Recipes' }));

  // ---- filters: a form whose submit (or a change) rewrites the URL
  const field = (name, label, control) => h('div', { class: 'field' }, h('label', { for: `f-${name}`, text: label }), control);
  const select = (name, options) => {
    const s = h('select', { id: `f-${name}`, name }, h('option', { value: '', text: 'any' }),
      options.map((o) => h('option', { value: o, text: o, selected: params.get(name) === o })));
    return s;
  };
  const input = (name, placeholder) => h('input', { id: `f-${name}`, name, type: 'search', value: params.get(name) || '', placeholder, autocomplete: 'off' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'filter recipes' },
    field('q', 'search', input('q', 'id or description')),
    field('status', 'status', select('status', STATUSES)),
    field('engine', 'engine', input('engine', 'e.g. vllm')),
    field('hardware', 'hardware', input('hardware', 'e.g. cpu')),
    field('verdict', 'verdict', input('verdict', 'e.g. benchmark-survivor')),
    field('pinned', 'pinned', select('pinned', ['true', 'false'])),
    field('limit', 'per page', h('select', { id: 'f-limit', name: 'limit' },
      PAGE_SIZES.map((n) => h('option', { value: String(n), text: String(n), selected: n === limit })))),
    h('div', { class: 'field buttons' }, h('button', { type: 'submit', text: 'Apply' }),
      h('a', { href: '#/recipes', class: 'button-link', text: 'Clear' })));
  const apply = (event) => {
    if (event) event.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form)) next.set(k, String(v).trim());
    if (sort !== 'id') next.set('sort', sort);
    go(next);
  };
  form.addEventListener('submit', apply);
  for (const s of form.querySelectorAll('select')) s.addEventListener('change', apply);
  el.append(form);

  // ---- the table, each column header a sort button that says its order
  const current = sort.replace(/^-/, '');
  const descending = sort.startsWith('-');
  const headerFor = ([key, title]) => {
    const next = new URLSearchParams(params);
    next.set('sort', current === key && !descending ? `-${key}` : key);
    next.delete('offset');
    const order = current === key ? (descending ? 'descending' : 'ascending') : 'none';
    return { key, title, order, href: `#/recipes?${next}` };
  };
  const headers = COLUMNS.map(headerFor);
  const rows = page.data;
  const n = (x) => x.toLocaleString('en-US');
  const summary = total === 0 ? 'no recipe matches' : `${n(offset + 1)}–${n(offset + rows.length)} of ${n(total)}`;
  el.append(h('p', { class: 'summary', id: 'recipes-summary', 'aria-live': 'polite', text: summary }));
  if (rows.length) {
    el.append(h('div', { class: 'table-wrap' },
      h('table', { id: 'recipes-table', class: 'stack' },
        h('thead', {}, h('tr', {},
          headers.map((c) => h('th', { scope: 'col', 'aria-sort': c.order },
            h('a', { href: c.href, class: 'sort' }, c.title, h('span', { 'aria-hidden': 'true', text: c.order === 'ascending' ? ' ▲' : c.order === 'descending' ? ' ▼' : '' })))),
          h('th', { scope: 'col', text: 'pinned' }))),
        h('tbody', {}, rows.map((r) => h('tr', {},
          h('td', { 'data-label': 'recipe' }, recipeLink(r.id)),
          h('td', { 'data-label': 'status' }, statusBadge(r.status)),
          h('td', { 'data-label': 'engine', text: r.engine }),
          h('td', { 'data-label': 'hardware', text: r.hardware_id }),
          h('td', { 'data-label': 'verdict', text: r.verdict ?? '—' }),
          h('td', { 'data-label': 'pinned', text: r.pinned ? 'yes' : 'no' })))))));
  }

  // ---- paging
  const pageLink = (label, to, enabled) => {
    const next = new URLSearchParams(params);
    next.set('offset', String(to));
    return enabled ? h('a', { href: `#/recipes?${next}`, class: 'button-link', text: label }) : h('span', { class: 'button-link disabled', 'aria-disabled': 'true', text: label });
  };
  const last = Math.max(0, Math.floor((total - 1) / limit) * limit);
  el.append(h('nav', { class: 'pager', 'aria-label': 'pages' },
    pageLink('« first', 0, offset > 0),
    pageLink('‹ previous', Math.max(0, offset - limit), offset > 0),
    h('span', { text: ` page ${Math.floor(offset / limit) + 1} of ${Math.max(1, Math.ceil(total / limit))} ` }),
    pageLink('next ›', offset + limit, offset + limit < total),
    pageLink('last »', last, offset < last)));
}
