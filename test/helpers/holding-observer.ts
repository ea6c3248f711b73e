/** A response observer whose `answered()` hands back a promise the test settles: the relay holds the answer's last bytes until then. */
import { type ResponseObserver } from '../../src/proxy/forwarder.js';

export function holdingObserver(): { observe: ResponseObserver; release: () => void; asked: () => boolean } {
  let release: () => void = () => undefined;
  let asked = false;
  return {
    observe: {
      event: () => undefined,
      body: () => undefined,
      bodyEnd: () => undefined,
      answered: () => {
        asked = true;
        return new Promise<void>((resolve) => (release = resolve));
      },
    },
    release: () => release(),
    asked: () => asked,
  };
}
