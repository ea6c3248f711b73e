/**
 * Headless Chromium for tests, driven by puppeteer-core: always the system's `chromium` (Debian's
 * package, installed by `.ci/run`), never a downloaded browser. Rejects (does not skip) when it is
 * not installed. `close()` ends the browser process; an exit hook kills it should the test process
 * end first.
 */
import { existsSync } from 'node:fs';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
/** A cold start on a loaded 2-core CI machine is slow, not this slow. */
const LAUNCH_TIMEOUT_MS = 30_000;

export interface TestBrowser {
  browser: Browser;
  /** A new tab of `width` × `height`. */
  page(width: number, height: number): Promise<Page>;
  close(): Promise<void>;
}

export async function launchChromium(): Promise<TestBrowser> {
  const executablePath = CANDIDATES.find((path) => existsSync(path));
  if (!executablePath) throw new Error(`chromium is not installed (looked for ${CANDIDATES.join(', ')}): apt-get install -y chromium`);
  const browser = await puppeteer.launch({
    executablePath,
    headless: true,
    timeout: LAUNCH_TIMEOUT_MS,
    // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check', '--disable-extensions', '--disable-background-networking'],
  });
  const kill = (): void => {
    browser.process()?.kill('SIGKILL');
  };
  process.once('exit', kill);
  return {
    browser,
    async page(width, height) {
      const page = await browser.newPage();
      await page.setViewport({ width, height });
      return page;
    },
    async close() {
      process.removeListener('exit', kill);
      await browser.close();
    },
  };
}
