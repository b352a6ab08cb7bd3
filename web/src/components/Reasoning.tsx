import { Markdown } from './Markdown';

/** The model's thinking (`reasoning_content`), folded away unless it is still the only thing streaming. */
export function Reasoning({ text, thinking }: { text: string; thinking: boolean }) {
  return (
    <details class="reasoning" open={thinking} data-testid="reasoning">
      <summary>{thinking ? 'Thinking...' : 'Reasoning'}</summary>
      <Markdown text={text} />
    </details>
  );
}
