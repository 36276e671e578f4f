// Drives Debian's headless Chromium over the DevTools protocol (Node 22's WebSocket), for
// mcpgate's approval test: opens URL, takes a screenshot (PNG, when a path is given),
// clicks the element SELECTOR with the mouse (its centre), waits for the page the click
// leads to, and prints one JSON object: whether it clicked, and the page's text after.
// Usage: node browser_click.mjs URL SELECTOR PORT [SCREENSHOT]
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [url, selector, port, screenshot] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), 'mcpgate-chromium-'));
const browser = spawn('chromium', [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-dev-shm-usage', '--window-size=1100,900', '--hide-scrollbars',
    `--remote-debugging-port=${port}`, '--remote-debugging-address=127.0.0.1',
    `--user-data-dir=${profile}`, 'about:blank',
], { stdio: 'ignore' });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const finish = (out, code) => {
    console.log(JSON.stringify(out));
    browser.kill('SIGKILL');
    process.exit(code);
};
setTimeout(() => finish({ error: 'timed out' }, 1), 30000);

let target;
for (let i = 0; i < 100 && !target; i++) {
    try {
        const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
        target = list.find((t) => t.type === 'page');
    } catch { /* not up yet */ }
    if (!target) await sleep(100);
}
if (!target) finish({ error: 'no page to drive' }, 1);
const ws = new WebSocket(target.webSocketDebuggerUrl);
await new Promise((r) => ws.addEventListener('open', r, { once: true }));
let next = 1;
const waiting = new Map();
const events = [];
ws.addEventListener('message', (m) => {
    const msg = JSON.parse(m.data);
    if (msg.id && waiting.has(msg.id)) {
        waiting.get(msg.id)(msg);
        waiting.delete(msg.id);
    } else if (msg.method) {
        events.push(msg.method);
    }
});
const send = (method, params = {}) => new Promise((resolve) => {
    const id = next++;
    waiting.set(id, resolve);
    ws.send(JSON.stringify({ id, method, params }));
});
const value = async (expression) =>
    (await send('Runtime.evaluate', { expression, returnByValue: true })).result?.result?.value;
const loaded = async (count) => {
    for (let i = 0; i < 100 && events.filter((e) => e === 'Page.loadEventFired').length < count; i++) await sleep(50);
};

await send('Page.enable');
await send('Page.navigate', { url });
await loaded(1);
const box = await value(`(() => { const e = document.querySelector(${JSON.stringify(selector)});
  if (!e) return null; const r = e.getBoundingClientRect();
  return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
if (!box) finish({ clicked: false, text: await value('document.body.innerText') }, 0);
if (screenshot) {
    const shot = await send('Page.captureScreenshot', { format: 'png' });
    writeFileSync(screenshot, Buffer.from(shot.result.data, 'base64'));
}
for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased']) {
    await send('Input.dispatchMouseEvent', { type, x: box.x, y: box.y, button: 'left', clickCount: 1 });
}
await loaded(2);
finish({ clicked: true, url: await value('location.href'), text: await value('document.body.innerText') }, 0);
