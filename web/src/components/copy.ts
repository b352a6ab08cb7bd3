/** Put text on the clipboard (a no-op where the page may not). */
export function copyText(text: string): void {
  void navigator.clipboard?.writeText(text).catch(() => undefined);
}
