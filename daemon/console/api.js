// The console's only way to anvild: the public /api/v1, on the origin that served the page.
// Reads are open; writes carry the bearer token, asked for once and kept in sessionStorage
// (this tab's session only, never in localStorage or a cookie).

const TOKEN_KEY = 'anvil.console.token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY); }
export function forgetToken() { sessionStorage.removeItem(TOKEN_KEY); }
function keepToken(value) { sessionStorage.setItem(TOKEN_KEY, value); }

async function answer(response) {
  let body = null;
  const text = await response.text();
  if (text) {
    try { body = JSON.parse(text); } catch { body = null; }
  }
  if (!response.ok) {
    const e = body && body.error ? body.error : { code: 'error', message: `${response.status} ${response.statusText}` };
    throw new ApiError(response.status, e.code, e.message);
  }
  return body;
}

export async function get(path) {
  return answer(await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' }));
}

// Asks for the token (a modal dialog) and resolves with it, or with null when cancelled.
function askForToken(why) {
  const dialog = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const cancel = document.getElementById('token-cancel');
  document.getElementById('token-why').textContent = why;
  input.value = '';
  return new Promise((resolve) => {
    const done = (value) => {
      form.removeEventListener('submit', onSubmit);
      cancel.removeEventListener('click', onCancel);
      dialog.removeEventListener('cancel', onCancel);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (value) done(value);
    };
    const onCancel = (event) => { event.preventDefault(); done(null); };
    form.addEventListener('submit', onSubmit);
    cancel.addEventListener('click', onCancel);
    dialog.addEventListener('cancel', onCancel);
    dialog.showModal();
    input.focus();
  });
}

const FIRST_ASK = "This action writes to anvild, so it needs the bearer token from anvild's token file " +
  '(<data_dir>/api-token). The console keeps it for this browser session only.';

// A write. Without a kept token it asks for one first; a 401 forgets the token and asks again once.
export async function post(path, body, onTokenChange) {
  let value = token();
  let why = FIRST_ASK;
  let refused = null;
  for (let attempt = 0; attempt < 2; ++attempt) {
    if (!value) {
      value = await askForToken(why);
      // Cancelled after a refusal: the write was refused, and that is what the caller reports.
      if (!value) throw refused || new ApiError(0, 'cancelled', 'cancelled: no token given');
      keepToken(value);
      if (onTokenChange) onTokenChange();
    }
    const response = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', Authorization: `Bearer ${value}` },
      body: body === undefined ? '' : JSON.stringify(body),
    });
    try {
      return await answer(response);
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 401) throw e;
      forgetToken();
      if (onTokenChange) onTokenChange();
      refused = e;
      value = null;
      why = `anvild refused that token (${e.message}). Enter the token from anvild's token file.`;
      if (attempt === 1) throw e;
    }
  }
  throw new ApiError(401, 'unauthorized', 'refused');
}
