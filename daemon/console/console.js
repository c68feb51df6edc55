// The console's shell: the router (#/, #/recipes, #/recipe/<id>, #/decisions, #/engines), the
// token's sign-in state, notices, and the live feed. It polls GET /api/v1/events with the feed's
// cursor and, when something happened, redraws the page in view (each view reads the API again).
import * as api from './api.js';
import { h, clear } from './dom.js';
import { renderOverview } from './overview.js';
import { renderRecipes } from './recipes.js';
import { renderRecipe } from './recipe.js';
import { renderDecisions } from './decisions.js';
import { renderEngines } from './engines.js';

const main = document.getElementById('main');
const notice = document.getElementById('notice');
const liveState = document.getElementById('live-state');

const POLL_MS = 2000;
const live = { cursor: null, recent: [], listeners: new Set(), failures: 0 };

function notify(text, kind = 'info') {
  notice.hidden = false;
  notice.className = `notice notice-${kind}`;
  notice.textContent = text;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { notice.hidden = true; }, kind === 'error' ? 15000 : 6000);
}

function renderAuth() {
  const el = clear(document.getElementById('auth'));
  if (api.token()) {
    el.append(h('span', { text: 'token kept for this session' }), ' ',
      h('button', { type: 'button', class: 'link', onclick: () => { api.forgetToken(); renderAuth(); notify('Token forgotten.'); } }, 'Forget token'));
  } else {
    el.append(h('span', { text: 'read-only: actions ask for the token' }));
  }
}

// A write from a view: asks for the token when needed, reports the outcome, redraws.
async function act(label, path, body) {
  try {
    const answer = await api.post(path, body, renderAuth);
    notify(`${label}: done.`, 'ok');
    route();
    return answer;
  } catch (e) {
    if (e.code === 'cancelled') notify(`${label}: cancelled, nothing was sent.`);
    else notify(`${label} refused: ${e.message}`, 'error');
    throw e;
  }
}

const ctx = {
  api,
  act,
  notify,
  live,
  // Views that show the feed register here for each new batch of events.
  onEvents(fn) { live.listeners.add(fn); return () => live.listeners.delete(fn); },
};

function parseHash() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = hash.split('?');
  return { path, params: new URLSearchParams(query) };
}

let rendering = 0;
async function route({ quiet = false } = {}) {
  const { path, params } = parseHash();
  const mine = ++rendering;
  live.listeners.clear();
  let section = 'overview';
  let view;
  if (path === '/' || path === '') view = (el) => renderOverview(el, ctx);
  else if (path === '/recipes') { section = 'recipes'; view = (el) => renderRecipes(el, ctx, params); }
  else if (path.startsWith('/recipe/')) { section = 'recipes'; view = (el) => renderRecipe(el, ctx, decodeURIComponent(path.slice('/recipe/'.length))); }
  else if (path === '/decisions') { section = 'decisions'; view = (el) => renderDecisions(el, ctx); }
  else if (path === '/engines') { section = 'engines'; view = (el) => renderEngines(el, ctx); }
  else view = (el) => el.append(h('h1', { text: 'Not found' }), h('p', {}, 'No such page. ', h('a', { href: '#/', text: 'Go to the overview' })));

  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  // Draw off-page, then swap, so a redraw from the live feed does not flicker or lose scroll.
  const next = h('div', { class: 'view' });
  main.setAttribute('aria-busy', 'true');
  try {
    await view(next);
  } catch (e) {
    next.append(h('h1', { text: 'Could not load this page' }), h('p', { class: 'error', text: e.message }));
  }
  if (mine !== rendering) return;
  const keepFocus = quiet && main.contains(document.activeElement) ? document.activeElement.id : null;
  clear(main).append(next);
  main.setAttribute('aria-busy', 'false');
  const title = next.querySelector('h1');
  document.title = `${title ? title.textContent : 'anvil'} · anvil console`;
  if (keepFocus && document.getElementById(keepFocus)) document.getElementById(keepFocus).focus();
  else if (!quiet) main.focus({ preventScroll: true });
}

// The feed: the newest events first, then whatever comes after the cursor.
async function poll() {
  try {
    const path = live.cursor ? `/api/v1/events?after=${encodeURIComponent(live.cursor)}&limit=200` : '/api/v1/events?last=30';
    const answer = await api.get(path);
    const first = live.cursor === null;
    live.cursor = answer.meta.next;
    live.failures = 0;
    const items = answer.data;
    if (items.length) {
      live.recent = [...live.recent, ...items].slice(-50);
      if (!first) {
        for (const fn of [...live.listeners]) fn(items);
        // The open view reads the API again; the overview also lists what happened.
        if (!document.querySelector('dialog[open]') && !document.activeElement?.matches('input, select, textarea')) route({ quiet: true });
      }
    }
    liveState.textContent = `live updates: on (feed at ${live.cursor})`;
  } catch (e) {
    live.failures += 1;
    liveState.textContent = `live updates: anvild did not answer (${e.message}); retrying`;
  }
  setTimeout(poll, live.failures ? Math.min(POLL_MS * 2 ** live.failures, 30000) : POLL_MS);
}

window.addEventListener('hashchange', () => route());
renderAuth();
// The first draw leaves focus where the browser put it (the skip link comes first); later
// navigation moves it to the new page.
poll().then(() => route({ quiet: true }));
