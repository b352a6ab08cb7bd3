// Images attached to a message: read from a file picker, a paste or a drop as data: URLs, within the size the
// server takes (64 MiB; the app keeps conversations in IndexedDB, so large images are worth keeping small).

/** The most bytes one attached image may have. */
export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

/** The image files among `files`, as data: URLs; others (and oversized images) are reported, not attached. */
export async function readImages(files: Iterable<File>): Promise<{ urls: string[]; refused: string[] }> {
  const urls: string[] = [];
  const refused: string[] = [];
  for (const f of files) {
    if (!f.type.startsWith('image/')) {
      refused.push(`${f.name || 'a file'} is not an image`);
      continue;
    }
    if (f.size > MAX_IMAGE_BYTES) {
      refused.push(`${f.name || 'an image'} is over ${MAX_IMAGE_BYTES >> 20} MiB`);
      continue;
    }
    urls.push(await dataUrl(f));
  }
  return { urls, refused };
}

function dataUrl(f: Blob): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error ?? new Error('the image could not be read'));
    r.readAsDataURL(f);
  });
}
