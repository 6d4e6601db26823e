/*
 * Web Workers for pages opened from the file system (site/index.html), where browsers refuse
 * `new Worker("file://...")` (SecurityError), and with it the site's search, which runs in a
 * worker. Written for this site: on file:// only, `Worker` becomes a hidden iframe whose
 * document (srcdoc, so it shares the page's origin) loads the worker's script with a <script>
 * tag, which file:// allows. Messages cross as the worker API says: the page's postMessage
 * becomes a "message" event in the frame, and the frame's postMessage an event on the Worker.
 * The name holds "iframe-worker" so that Material's offline plugin, which adds a copy of such a
 * shim from a CDN unless one is configured, adds nothing: the site loads no script from elsewhere.
 */
(function () {
  "use strict";
  if (window.location.protocol !== "file:" || window.FileWorker) {
    return;
  }

  class FileWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this._pending = [];
      this._frame = document.createElement("iframe");
      this._frame.hidden = true;
      this._frame.setAttribute("aria-hidden", "true");
      const script = new URL(url, window.location.href).href;
      this._frame.srcdoc =
        "<!doctype html><script>" +
        "window.postMessage = function (data) { parent.FileWorker.deliver(frameElement, data); };" +
        "window.importScripts = function () {" +
        " throw new Error('importScripts is not available to a worker opened from a file'); };" +
        "<\/script><script src=\"" + script.replace(/"/g, "&quot;") + "\"><\/script>";
      this._frame.addEventListener("load", () => {
        const pending = this._pending;
        this._pending = null;
        pending.forEach((data) => this._send(data));
      });
      FileWorker.workers.set(this._frame, this);
      (document.body || document.documentElement).appendChild(this._frame);
    }

    static deliver(frame, data) {
      const worker = FileWorker.workers.get(frame);
      if (worker) {
        const event = new MessageEvent("message", { data: data });
        worker.dispatchEvent(event);
        if (typeof worker.onmessage === "function") {
          worker.onmessage(event);
        }
      }
    }

    postMessage(data) {
      if (this._pending) {
        this._pending.push(data);
      } else {
        this._send(data);
      }
    }

    _send(data) {
      const frame = this._frame.contentWindow;
      frame.dispatchEvent(new frame.MessageEvent("message", { data: data }));
    }

    terminate() {
      FileWorker.workers.delete(this._frame);
      this._frame.remove();
    }
  }

  FileWorker.workers = new Map();
  window.FileWorker = FileWorker;
  window.Worker = FileWorker;
})();
