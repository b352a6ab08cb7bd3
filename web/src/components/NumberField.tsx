/** A number setting that may be left empty (the server's default). */
export function NumberField(props: {
  label: string;
  name: string;
  value: number | null;
  step?: number;
  min?: number;
  max?: number;
  hint?: string;
  onChange: (v: number | null) => void;
}) {
  return (
    <label class="field">
      <span>{props.label}</span>
      <input
        type="number"
        name={props.name}
        data-testid={`setting-${props.name}`}
        inputMode="decimal"
        step={props.step ?? 'any'}
        min={props.min}
        max={props.max}
        placeholder={props.hint ?? 'default'}
        value={props.value ?? ''}
        onChange={(e) => {
          const raw = e.currentTarget.value.trim();
          const n = Number(raw);
          props.onChange(raw === '' || !Number.isFinite(n) ? null : n);
        }}
      />
    </label>
  );
}
