// Gasoline — pixel comparison of two screenshots (the `visual_diff` command), run in the service
// worker: createImageBitmap decodes the data URLs, an OffscreenCanvas gives the pixels and encodes
// the diff image. diffPixels is pure (no DOM, no chrome.*) so it can be checked anywhere.

/**
 * Compare two RGBA images ({width, height, data}). A pixel changed when one colour channel (or
 * alpha) moved by more than `pixelThreshold`. Pixels outside the overlap (a size change) count as
 * changed. Changed pixels are grouped into `cell`-pixel grid cells; 8-connected changed cells form a
 * region (its bounding box and changed-pixel count). Returns the counts, the regions (largest
 * first, at most `maxRegions`) and the diff image's RGBA data: changed pixels red, size-change
 * area magenta, the rest a faded grey copy of the current image.
 */
export function diffPixels(a, b, { pixelThreshold = 24, cell = 16, maxRegions = 50 } = {}) {
  const width = Math.max(a.width, b.width);
  const height = Math.max(a.height, b.height);
  const cw = Math.min(a.width, b.width);
  const ch = Math.min(a.height, b.height);
  const out = new Uint8ClampedArray(width * height * 4);
  const gw = Math.ceil(width / cell);
  const gh = Math.ceil(height / cell);
  const cells = new Uint32Array(gw * gh);
  const thr = Math.max(0, Math.min(255, Number(pixelThreshold) || 0));
  let changed = 0;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const o = (y * width + x) * 4;
      let hit;
      if (x < cw && y < ch) {
        const ia = (y * a.width + x) * 4;
        const ib = (y * b.width + x) * 4;
        const ad = a.data;
        const bd = b.data;
        hit = Math.abs(ad[ia] - bd[ib]) > thr || Math.abs(ad[ia + 1] - bd[ib + 1]) > thr
          || Math.abs(ad[ia + 2] - bd[ib + 2]) > thr || Math.abs(ad[ia + 3] - bd[ib + 3]) > thr;
        if (hit) {
          out[o] = 255; out[o + 1] = 0; out[o + 2] = 0; out[o + 3] = 255;
        } else {
          const lum = 0.299 * bd[ib] + 0.587 * bd[ib + 1] + 0.114 * bd[ib + 2];
          const v = 255 - (255 - lum) * 0.3;
          out[o] = v; out[o + 1] = v; out[o + 2] = v; out[o + 3] = 255;
        }
      } else {
        hit = true;
        out[o] = 255; out[o + 1] = 0; out[o + 2] = 255; out[o + 3] = 255;
      }
      if (hit) {
        changed++;
        cells[Math.floor(y / cell) * gw + Math.floor(x / cell)]++;
      }
    }
  }
  // Regions: 8-connected components of changed cells.
  const seen = new Uint8Array(gw * gh);
  const regions = [];
  const stack = [];
  for (let i = 0; i < cells.length; i++) {
    if (!cells[i] || seen[i]) continue;
    let minX = gw; let minY = gh; let maxX = -1; let maxY = -1; let pixels = 0;
    stack.push(i);
    seen[i] = 1;
    while (stack.length) {
      const k = stack.pop();
      const cx = k % gw;
      const cy = (k - cx) / gw;
      pixels += cells[k];
      if (cx < minX) minX = cx;
      if (cy < minY) minY = cy;
      if (cx > maxX) maxX = cx;
      if (cy > maxY) maxY = cy;
      for (let dy = -1; dy <= 1; dy++) {
        for (let dx = -1; dx <= 1; dx++) {
          const nx = cx + dx;
          const ny = cy + dy;
          if (nx < 0 || ny < 0 || nx >= gw || ny >= gh) continue;
          const n = ny * gw + nx;
          if (cells[n] && !seen[n]) { seen[n] = 1; stack.push(n); }
        }
      }
    }
    const x = minX * cell;
    const y = minY * cell;
    regions.push({ x, y, width: Math.min((maxX + 1) * cell, width) - x, height: Math.min((maxY + 1) * cell, height) - y, pixels });
  }
  regions.sort((p, q) => q.pixels - p.pixels);
  const total = width * height;
  return {
    width,
    height,
    total_pixels: total,
    changed_pixels: changed,
    changed_ratio: total ? changed / total : 0,
    size_changed: a.width !== b.width || a.height !== b.height,
    baseline_size: { width: a.width, height: a.height },
    current_size: { width: b.width, height: b.height },
    region_count: regions.length,
    regions: regions.slice(0, Math.max(1, Math.min(Number(maxRegions) || 50, 500))),
    diff: out,
  };
}

async function pixelsOf(dataUrl) {
  const blob = await (await fetch(dataUrl)).blob();
  const bitmap = await createImageBitmap(blob);
  try {
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    const ctx = canvas.getContext('2d', { willReadFrequently: true });
    ctx.drawImage(bitmap, 0, 0);
    return ctx.getImageData(0, 0, bitmap.width, bitmap.height);
  } finally {
    bitmap.close();
  }
}

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

const IMAGE_URL = /^data:image\/(?:png|jpeg|webp);base64,/i;
/** The largest diff image sent back (bigger ones are left out; the numbers still come back). */
const MAX_DIFF_DATA_URL = 3 * 1024 * 1024;

/** The `visual_diff` command: params {baseline, current} data URLs, pixel_threshold, max_regions. */
export async function visualDiff(params) {
  if (typeof params.baseline !== 'string' || !IMAGE_URL.test(params.baseline)
      || typeof params.current !== 'string' || !IMAGE_URL.test(params.current)) {
    return { error: 'invalid_param', message: 'visual_diff needs baseline and current as base64 data:image URLs' };
  }
  let a;
  let b;
  try {
    [a, b] = await Promise.all([pixelsOf(params.baseline), pixelsOf(params.current)]);
  } catch (e) {
    return { error: 'decode_failed', message: 'could not decode an image: ' + String((e && e.message) || e) };
  }
  const result = diffPixels(a, b, { pixelThreshold: params.pixel_threshold ?? 24, maxRegions: params.max_regions });
  const { diff } = result;
  delete result.diff;
  const canvas = new OffscreenCanvas(result.width, result.height);
  canvas.getContext('2d').putImageData(new ImageData(diff, result.width, result.height), 0, 0);
  const blob = await canvas.convertToBlob({ type: 'image/jpeg', quality: 0.8 });
  const url = 'data:image/jpeg;base64,' + base64Of(await blob.arrayBuffer());
  if (url.length <= MAX_DIFF_DATA_URL) result.diff_data_url = url;
  else result.diff_image_omitted = true;
  return result;
}

/** The largest image a tool result inlines, in base64 characters (gasoline/core/storage/screenshots.py). */
export const MAX_INLINE_IMAGE_CHARS = 1000000;
/** The long edge of the inline preview (what vision models use without scaling further). */
export const PREVIEW_MAX_EDGE = 1568;

/**
 * A smaller copy of a screenshot data URL for the agent to see inline (MCP image content): null
 * when the screenshot already fits (the daemon inlines it as it is); else a JPEG data URL whose
 * long edge is at most PREVIEW_MAX_EDGE px and whose base64 is at most MAX_INLINE_IMAGE_CHARS,
 * lowering the quality, then the size, until it fits (null if nothing does).
 */
export async function previewOf(dataUrl, { maxEdge = PREVIEW_MAX_EDGE, maxChars = MAX_INLINE_IMAGE_CHARS } = {}) {
  const comma = dataUrl.indexOf(',');
  if (dataUrl.length - comma - 1 <= maxChars) return null;
  const bitmap = await createImageBitmap(await (await fetch(dataUrl)).blob());
  try {
    let scale = Math.min(1, maxEdge / Math.max(bitmap.width, bitmap.height));
    for (let attempt = 0; attempt < 6; attempt++) {
      const width = Math.max(1, Math.round(bitmap.width * scale));
      const height = Math.max(1, Math.round(bitmap.height * scale));
      const canvas = new OffscreenCanvas(width, height);
      canvas.getContext('2d').drawImage(bitmap, 0, 0, width, height);
      for (const quality of [0.8, 0.6, 0.45]) {
        const blob = await canvas.convertToBlob({ type: 'image/jpeg', quality });
        if ((blob.size + 2) / 3 * 4 <= maxChars) return 'data:image/jpeg;base64,' + base64Of(await blob.arrayBuffer());
      }
      scale *= 0.7;
    }
    return null;
  } finally {
    bitmap.close();
  }
}
