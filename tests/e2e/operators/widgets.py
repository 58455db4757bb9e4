"""The typed resource of the end-to-end tests of typed resources and generated manifests: a Widget."""
import pydantic

import kopf.typed


class WidgetSpec(pydantic.BaseModel):
    """What a widget should be."""

    size: int = pydantic.Field(1, ge=0, le=100, description="How big it is.")
    shape: str = pydantic.Field('round', pattern='^(round|square)$')
    labels: dict[str, str] = {}

    @pydantic.model_validator(mode='after')
    def even_squares(self) -> 'WidgetSpec':
        """A rule that no schema can say: the server lets it through, the operator's model does not."""
        if self.shape == 'square' and self.size % 2:
            raise ValueError("a square widget has an even size")
        return self


class Extras(pydantic.BaseModel):
    """A part of the spec that keeps whatever it is given."""

    model_config = pydantic.ConfigDict(extra='allow')
    note: str = ''


class WidgetStatus(pydantic.BaseModel):
    """What the operator says about it: its handlers' results and kopf's own records are kept too."""

    model_config = pydantic.ConfigDict(extra='allow')
    conditions: list[kopf.typed.Condition] = []


class Widget(kopf.typed.CustomResource, group='rbac.e2e.kopf.dev', version='v1', short_names=['wdg'],
             printer_columns=[kopf.typed.PrinterColumn('Size', '.spec.size')]):
    spec: WidgetSpec
    extras: Extras | None = None
    status: WidgetStatus = WidgetStatus()
