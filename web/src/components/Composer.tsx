import { useEffect, useRef, useState } from 'preact/hooks';
import { current } from '../state/conversations';
import { send, stop, working } from '../state/generate';
import { readImages } from '../state/images';
import { modelFor, takesImages } from '../state/models';
import { banner, focusComposer } from '../state/ui';
import { Icon } from './icons';

/** Where you type: Enter sends, Shift+Enter breaks the line; while a reply streams, the button stops it. With a
 *  model that takes images, images come in by the picker, a paste or a drop, shown above the text until sent. */
export function Composer() {
  const [text, setText] = useState('');
  const [images, setImages] = useState<string[]>([]);
  const [dragging, setDragging] = useState(false);
  const area = useRef<HTMLTextAreaElement>(null);
  const picker = useRef<HTMLInputElement>(null);
  const streaming = working.value;
  const convId = current.value.id;
  const vision = takesImages(modelFor(current.value.model));

  useEffect(() => {
    area.current?.focus();
  }, [focusComposer.value, convId]);

  // Grow with the text, up to a limit.
  useEffect(() => {
    const el = area.current;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(el.scrollHeight, 240)}px`;
  }, [text]);

  const attach = async (files: Iterable<File>) => {
    if (!vision) {
      banner.value = { message: 'This model does not take images.' };
      return;
    }
    const { urls, refused } = await readImages(files);
    if (urls.length) setImages((now) => [...now, ...urls]);
    if (refused.length) banner.value = { message: `Not attached: ${refused.join('; ')}.` };
  };

  const ready = (text.trim().length > 0 || images.length > 0) && !streaming;
  const submit = () => {
    if (!ready) return;
    void send(text, images);
    setText('');
    setImages([]);
  };

  return (
    <form
      class={dragging ? 'composer dragging' : 'composer'}
      onSubmit={(e) => {
        e.preventDefault();
        submit();
      }}
      onDragOver={(e) => {
        if (!vision || !e.dataTransfer?.types.includes('Files')) return;
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        setDragging(false);
        if (!e.dataTransfer?.files.length) return;
        e.preventDefault();
        void attach(Array.from(e.dataTransfer.files));
      }}
    >
      {images.length > 0 && (
        <div class="attachments" data-testid="attachments">
          {images.map((url, i) => (
            <div class="attachment" key={url.slice(-32) + i}>
              <img src={url} alt={`Attached image ${i + 1}`} />
              <button
                type="button"
                class="attachment-remove"
                aria-label={`Remove image ${i + 1}`}
                onClick={() => setImages((now) => now.filter((_, j) => j !== i))}
              >
                <Icon name="close" size={14} />
              </button>
            </div>
          ))}
        </div>
      )}
      {vision && (
        <>
          <input
            ref={picker}
            type="file"
            accept="image/png,image/jpeg,image/webp,image/gif,image/bmp"
            multiple
            hidden
            data-testid="image-input"
            onChange={(e) => {
              const files = e.currentTarget.files;
              if (files) void attach(Array.from(files));
              e.currentTarget.value = '';
            }}
          />
          <button
            type="button"
            class="attach-btn"
            aria-label="Attach images"
            title="Attach images (or paste, or drop them here)"
            data-testid="attach"
            onClick={() => picker.current?.click()}
          >
            <Icon name="image" />
          </button>
        </>
      )}
      <textarea
        ref={area}
        rows={1}
        value={text}
        placeholder={vision ? 'Message the model, or add images' : 'Message the model'}
        aria-label="Message"
        data-testid="composer"
        onInput={(e) => setText(e.currentTarget.value)}
        onPaste={(e) => {
          const files = Array.from(e.clipboardData?.files ?? []).filter((f) => f.type.startsWith('image/'));
          if (!files.length) return;
          e.preventDefault();
          void attach(files);
        }}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            submit();
          }
        }}
      />
      {streaming ? (
        <button type="button" class="send-btn stop" aria-label="Stop" title="Stop (Esc)" data-testid="stop" onClick={stop}>
          <Icon name="stop" />
        </button>
      ) : (
        <button type="submit" class="send-btn" aria-label="Send" title="Send (Enter)" data-testid="send" disabled={!ready}>
          <Icon name="send" />
        </button>
      )}
    </form>
  );
}
