// Building the page: elements from data with textContent only (nothing from the API is ever
// parsed as HTML), and the small formatters every view shares.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// Pass and fail in words, with a mark; colour only repeats what the text says.
export function verdictBadge(result) {
  const r = result === true ? 'pass' : result === false ? 'fail' : String(result ?? 'unknown');
  const mark = r === 'pass' ? '✓' : r === 'fail' ? '✗' : '?';
  return h('span', { class: `badge badge-${r.replace(/[^a-z_-]/gi, '')}` }, h('span', { 'aria-hidden': 'true', text: `${mark} ` }), r);
}

export function statusBadge(status) {
  return h('span', { class: `status status-${String(status).replace(/[^a-z_-]/gi, '')}`, text: String(status) });
}

// A condition is True or False (as the API says it), marked like pass and fail.
export function conditionBadge(ok) {
  return h('span', { class: `badge badge-${ok ? 'pass' : 'fail'}` }, h('span', { 'aria-hidden': 'true', text: ok ? '✓ ' : '✗ ' }), ok ? 'True' : 'False');
}

export function recipeLink(id) {
  return h('a', { href: `#/recipe/${encodeURIComponent(id)}`, text: id });
}

// "12 s ago", "3 min ago", "2 h ago", "4 d ago", with the time itself as the element's title.
export function ago(iso) {
  if (!iso) return h('span', { text: '—' });
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return h('span', { text: iso });
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  const text = s < 90 ? `${s} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : s < 172800 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
  return h('time', { datetime: iso, title: iso, text });
}

export function num(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  if (typeof value !== 'number') return String(value);
  if (value !== 0 && (Math.abs(value) >= 1e6 || Math.abs(value) < 1e-3)) return value.toExponential(digits - 1);
  return Number(value.toPrecision(Math.max(digits, 1))).toLocaleString('en-US', { maximumFractionDigits: 6 });
}

export function percent(value, digits = 1) {
  if (value === null || value === undefined) return '—';
  return `${(value * 100).toFixed(digits)} %`;
}

export function bytes(value) {
  if (value === null || value === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = value;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; ++i; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

// A table from rows: columns are [header, (row) => cell content].
export function table(columns, rows, { caption, empty = 'none', className } = {}) {
  if (!rows.length) return h('p', { class: 'empty', text: empty });
  // data-label: at a phone's width each row becomes a card whose cells name their column.
  return h('div', { class: 'table-wrap' },
    h('table', { class: `stack ${className || ''}` },
      caption ? h('caption', { text: caption }) : null,
      h('thead', {}, h('tr', {}, columns.map(([title]) => h('th', { scope: 'col', text: title })))),
      h('tbody', {}, rows.map((row) => h('tr', {}, columns.map(([title, cell]) => h('td', { 'data-label': title }, cell(row))))))));
}

// Key-value pairs as a description list.
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', { text: k }), h('dd', {}, v ?? '—')]));
}

export function section(title, ...children) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', { class: 'card', 'aria-labelledby': id }, h('h2', { id, text: title }), children);
}
