// What both pages share: calls to their own server's backend, with the CSRF token on changes.
const csrf = document.querySelector('meta[name="csrf-token"]')?.content ?? "";

export async function api(method, path, body, timeoutMs) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs),
  });
  let document = null;
  try {
    document = await response.json();
  } catch {
    document = null;
  }
  return { ok: response.ok, status: response.status, body: document };
}

export function pounds(pence) {
  const sign = pence < 0 ? "-" : "";
  const value = Math.abs(pence) / 100;
  return `${sign}£${value.toLocaleString("en-GB", { minimumFractionDigits: value % 1 ? 2 : 0, maximumFractionDigits: 2 })}`;
}

// Text only: whatever a message holds is shown, never run.
export function element(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

export function secondsLeft(windowClosesAt) {
  if (!windowClosesAt) return null;
  return Math.max(0, Math.ceil((Date.parse(windowClosesAt) - Date.now()) / 1000));
}
